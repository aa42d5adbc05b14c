"""`git hive demo` through the API: a whole run in a throwaway repository — an epic of eight
issues, scripted agents (no API key), the whole pipeline."""

from __future__ import annotations

from pathlib import Path

from hive.demo import run_demo
from hive.errors import BadInput

__all__ = ["run"]


def run(keep: Path | None = None) -> int:
    """Run the demo (in `keep`, a new or empty folder kept afterwards; default: a temporary one,
    removed); the exit code `git hive demo` ends with."""
    if keep is not None and keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise BadInput(f"--keep {keep}: it exists and is not empty; give a new directory")
    return run_demo(keep)
