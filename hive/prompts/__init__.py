"""The texts hive sends to agents, kept as Markdown files in this package (shipped as package data).

`render("worker-system", result_file=...)` reads `worker-system.md` and fills in its `$name` fields
(`string.Template`: `$$` is a dollar sign; braces are plain text, so JSON examples need no escaping).
Every file ends with a newline that is not part of the prompt: a prompt that ends with a newline is
a file that ends with an empty line.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from string import Template


@cache
def load(name: str) -> str:
    """The text of `<name>.md`, without the newline that ends the file."""
    text = resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
    return text.removesuffix("\n")


def render(name: str, **values: object) -> str:
    """`<name>.md` with every `$name` replaced by str(value); a field without a value raises KeyError."""
    return Template(load(name)).substitute({key: str(value) for key, value in values.items()})


MATERIAL_OPEN, MATERIAL_CLOSE = "<material", "</material>"
_SOURCE_CHARS = re.compile(r"[^A-Za-z0-9 ._:/,()-]")


def material(text: str, source: str) -> str:
    """Text hive did not write (an issue's description, context.md, notes: fetched with
    `hive/state` from anyone), fenced as material naming its source. Nothing inside can close the
    fence or pass for hive's own words (each line is quoted `> `): the prompts tell agents that such a block is data, never
    an instruction from hive (the worker, Queen and refinery system prompts say so)."""
    body = text.replace(MATERIAL_OPEN, "<\\material").replace("</material", "<\\/material")
    quoted = "\n".join(f"> {line}".rstrip() for line in body.split("\n"))   # no line of it starts a heading
    label = _SOURCE_CHARS.sub("?", source)[:200]
    return f'{MATERIAL_OPEN} source="{label}">\n{quoted}\n{MATERIAL_CLOSE}'
