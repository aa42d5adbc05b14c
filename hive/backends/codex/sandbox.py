"""The git directories Codex's `workspace-write` sandbox must leave writable for a commit."""

from __future__ import annotations

from pathlib import Path

MAX_CHILD_SCAN = 500              # worktrees looked at below a cwd that is not one itself


def git_writable_roots(cwd: str) -> list[str]:
    """The git directories a commit from `cwd` (or from worktrees directly in it) writes to."""
    roots: list[str] = []

    def add(path: Path) -> None:
        text = str(path)
        if text not in roots:
            roots.append(text)

    def from_dotgit(dotgit: Path) -> None:
        if dotgit.is_dir():
            add(dotgit.resolve())
            return
        try:
            content = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return
        if not content.startswith("gitdir:"):
            return
        gitdir = (dotgit.parent / content[len("gitdir:"):].strip()).resolve()
        add(gitdir)
        try:
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        except OSError:
            return
        add(common)

    start = Path(cwd).resolve()
    for directory in (start, *start.parents):
        dotgit = directory / ".git"
        if dotgit.exists():
            from_dotgit(dotgit)
            break
        if (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir():
            add(directory)                           # cwd lies inside a git dir (hive's worktrees dir)
            break
    if not (start / ".git").exists():
        try:
            children = sorted(start.iterdir())[:MAX_CHILD_SCAN]
        except OSError:
            children = []
        for child in children:
            if (child / ".git").is_file():
                from_dotgit(child / ".git")
    # the common dir first, then the worktrees' admin dirs: `[<common>, <admin>...]`
    commons = [r for r in roots if not Path(r, "commondir").is_file()]
    return commons + [r for r in roots if r not in commons]
