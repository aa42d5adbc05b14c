"""Plain helpers that set a test repository up as people have theirs. Import as
`from tests.repo_helpers import ...`.

    commit_hooks    commit_hooks(git, repo, folder, {name: script}) -> the folder: executable
                    hooks committed there, and `core.hooksPath` naming it (husky's setup)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def commit_hooks(git: Callable[..., Any], repo: Path, folder: str, hooks: dict[str, str]) -> Path:
    """Executable `hooks` (name -> script) committed in `repo/folder`, which `core.hooksPath`
    then names: the hooks are files of the branch, as husky and pre-commit set them up."""
    where = repo / folder
    where.mkdir(parents=True, exist_ok=True)
    for name, script in hooks.items():
        (where / name).write_text(script, encoding="utf-8")
        (where / name).chmod(0o755)
        git("add", f"{folder}/{name}", cwd=repo)
    git("commit", "-q", "-m", "the project's hooks", cwd=repo)
    git("config", "core.hooksPath", folder, cwd=repo)
    return where
