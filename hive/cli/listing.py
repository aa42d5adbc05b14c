"""Opening the project for a command, printing JSON, and `list --json` — all without click, so
that `hive.cli.main` can run `git hive list --json` without loading it."""

from __future__ import annotations

import json
import sys
from typing import Any, Collection

from hive.project import Project


def open_project() -> Project:
    """This repository's hive, caught up with `.hive/` edits and the branch (as every command
    starts)."""
    project = Project.open()
    project.checkout.wait_out_racy = True   # one command, then the process ends
    project.sync()
    return project


def print_json(data: Any) -> None:
    """Indented for a person at a terminal; compact for a script (json's indenting encoder is
    pure Python, ~4x slower on a 10k-issue listing)."""
    indent = 2 if sys.stdout.isatty() else None
    print(json.dumps(data, indent=indent, ensure_ascii=False), flush=True)


def print_json_text(text: str) -> None:
    """JSON already serialized (compact), printed as `print_json` would print its value."""
    if sys.stdout.isatty():
        print_json(json.loads(text))
    else:
        print(text, flush=True)


def list_json(project: Project | None = None, statuses: Collection[str] | None = None,
              parent: str | None = None) -> None:
    """`git hive list --json [--status S] [--parent ID]`: the issues, as the index serializes them."""
    project = project or open_project()
    if sys.stdout.isatty():
        print_json_text(project.index.list_json(statuses or None, parent=parent))
        return
    for part in project.index.list_json_parts(statuses or None, parent=parent):
        sys.stdout.write(part)
    print(flush=True)
