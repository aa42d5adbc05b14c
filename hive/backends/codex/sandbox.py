"""The git directories Codex's `workspace-write` sandbox must leave writable for a commit.

Only what a commit on hive's detached worktree HEAD writes: the worktree's own admin folder
(`<common>/worktrees/<id>`: HEAD, index, logs) and the object store. Never the whole common dir:
its `config`, `hooks`, `refs` and `packed-refs` stay read-only, so no ref moves (hive moves the
work branch itself; see `hive.jail.roles`).
"""

from __future__ import annotations

from pathlib import Path

MAX_CHILD_SCAN = 500              # worktrees looked at below a cwd that is not one itself


def git_writable_roots(cwd: str) -> list[str]:
    """The git directories a commit from `cwd` (or from worktrees directly in it) writes to:
    `[<common>/objects, <admin>...]`."""
    roots: list[str] = []

    def add(path: Path) -> None:
        text = str(path)
        if text not in roots:
            roots.append(text)

    def from_dotgit(dotgit: Path) -> None:
        if dotgit.is_dir():
            add(dotgit.resolve() / "objects")
            return
        try:
            content = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return
        if not content.startswith("gitdir:"):
            return
        gitdir = (dotgit.parent / content[len("gitdir:"):].strip()).resolve()
        try:
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        except OSError:
            return
        add(common / "objects")
        add(gitdir)

    start = Path(cwd).resolve()
    for directory in (start, *start.parents):
        dotgit = directory / ".git"
        if dotgit.exists():
            from_dotgit(dotgit)
            break
        if (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir():
            add(directory / "objects")               # cwd lies inside a git dir (hive's worktrees dir)
            break
    if not (start / ".git").exists():
        try:
            children = sorted(start.iterdir())[:MAX_CHILD_SCAN]
        except OSError:
            children = []
        for child in children:
            if (child / ".git").is_file():
                from_dotgit(child / ".git")
    objects = [r for r in roots if r.endswith("/objects")]
    return objects + [r for r in roots if r not in objects]
