"""Option types shared by the commands, with errors that read well in one line."""

from __future__ import annotations

import click


class Whole(click.IntRange):
    """A whole number within bounds (click's IntRange calls a bad one "not a valid integer range")."""

    name = "integer"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N"
