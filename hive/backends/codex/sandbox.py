"""Codex's own sandbox: the git directories its `workspace-write` mode must leave writable for a
commit, and the `bwrap` it must find first on PATH.

Only what a commit on hive's detached worktree HEAD writes: the worktree's own admin folder
(`<common>/worktrees/<id>`: HEAD, index, logs) and the object store. Never the whole common dir:
its `config`, `hooks`, `refs` and `packed-refs` stay read-only, so no ref moves (hive moves the
work branch itself; see `hive.jail.roles`).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

# where the codex npm package keeps its own bwrap: next to the binary, or from the node_modules root
BUNDLED_BWRAP = ("../codex-resources/bwrap", "@openai/codex-linux-*/vendor/*/codex-resources/bwrap",
                 "@openai/codex/node_modules/@openai/codex-linux-*/vendor/*/codex-resources/bwrap")
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


def bundled_bwrap_dir(program: str) -> str:
    """The folder of the `bwrap` shipped with the codex CLI `program`, "" when there is none.

    Codex runs its sandbox with the first `bwrap` on PATH; an older system one (Debian 12's
    0.8.0 lacks `--argv0`) makes every patch and command silently do nothing, so hive puts the
    bundled one first on the PATH Codex gets."""
    real = os.path.realpath(shutil.which(program) or program)
    here = os.path.dirname(real)
    candidates = [os.path.normpath(os.path.join(here, BUNDLED_BWRAP[0]))]
    marker = f"{os.sep}node_modules{os.sep}"
    if marker in real:
        root = real[:real.index(marker) + len(marker)]
        for pattern in BUNDLED_BWRAP[1:]:
            candidates += sorted(glob.glob(os.path.join(root, pattern)))
    for candidate in candidates:
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return os.path.dirname(candidate)
    return ""
