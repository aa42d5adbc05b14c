"""Printing JSON and `list --json` — without click, so that `hive.cli.main` can run
`git hive list --json` without loading it; `open_project` (`hive.api.listing`) as every command
starts."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Collection

from hive.api.listing import issues_json, open_project

if TYPE_CHECKING:
    from hive.api.listing import Project

__all__ = ["list_json", "open_project", "print_json", "print_json_text"]


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
    parts = issues_json(project or open_project(), statuses, parent)
    if sys.stdout.isatty():
        print_json_text("".join(parts))
        return
    for part in parts:
        sys.stdout.write(part)
    print(flush=True)
