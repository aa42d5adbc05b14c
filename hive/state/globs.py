"""The globs of an issue's `touches` (DESIGN §2): which files the work is expected to change.

A glob is a path relative to the repository root, `/`-separated, matched as a string and never
against the file system (it comes from `hive/state`, which may be anyone's: DESIGN §7). In a
segment `*` is any run of characters but `/`, `?` one of them, `[abc]` / `[a-z]` / `[!a]` a class;
a whole segment `**` is any number of segments, none included. A glob that ends with `/` is a
folder and everything under it (`src/auth/` is `src/auth/**`); any other names files only.

`overlap(a, b)`: whether some path matches both, decided exactly on segments and characters (a
class meets any class that shares a character with it), without listing paths.
"""

from __future__ import annotations

import re
from functools import lru_cache

MAX_GLOBS = 64          # per issue: a list of areas, not of files
MAX_GLOB_CHARS = 256
_CLASS = re.compile(r"\[!?\]?[^\]]*\]")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def problem(glob: str) -> str | None:
    """Why `glob` is not a valid `touches` glob, or None."""
    if not glob.strip():
        return "an empty glob"
    if len(glob) > MAX_GLOB_CHARS:
        return f"a glob longer than {MAX_GLOB_CHARS} characters"
    if _BAD_CHARS.search(glob):
        return f"{glob!r} holds a backslash or a control character"
    if glob.startswith("/"):
        return f"{glob!r} is absolute: write it relative to the repository root"
    for segment in glob.rstrip("/").split("/"):
        if segment in ("", ".", ".."):
            return f"{glob!r} has an empty, '.' or '..' segment"
        if "**" in segment and segment != "**":
            return f"{glob!r}: '**' must be a whole segment"
        if _unclosed_class(segment):
            return f"{glob!r} has an unclosed '['"
    return None


def problems(globs: list[str]) -> str | None:
    """Why a `touches` list is refused (its bounds, then its first bad glob), or None."""
    if len(globs) > MAX_GLOBS:
        return f"more than {MAX_GLOBS} globs"
    for glob in globs:
        found = problem(glob)
        if found:
            return found
    return None


def _unclosed_class(segment: str) -> bool:
    at = 0
    while at < len(segment):
        if segment[at] == "[":
            found = _CLASS.match(segment, at)
            if found is None:
                return True
            at = found.end()
        else:
            at += 1
    return False


# A segment as tokens: "*", None for "?", or a class (negated "!" or "", characters, ranges);
# a literal is a class of one.
CharClass = tuple[str, frozenset[str], tuple[tuple[str, str], ...]]
Token = str | CharClass | None


@lru_cache(maxsize=4096)
def _tokens(segment: str) -> tuple[Token, ...]:
    tokens: list[Token] = []
    at = 0
    while at < len(segment):
        ch = segment[at]
        if ch == "*":
            if not tokens or tokens[-1] != "*":
                tokens.append("*")
            at += 1
        elif ch == "?":
            tokens.append(None)
            at += 1
        elif ch == "[" and (found := _CLASS.match(segment, at)):
            tokens.append(_class(found.group()[1:-1]))
            at = found.end()
        else:
            tokens.append(("", frozenset(ch), ()))   # a literal: a class of one, not negated
            at += 1
    return tuple(tokens)


def _class(body: str) -> CharClass:
    negated = body.startswith("!")
    body = body[1:] if negated else body
    chars, ranges, at = set(), [], 0
    while at < len(body):
        if at + 2 < len(body) and body[at + 1] == "-":
            ranges.append((body[at], body[at + 2]))
            at += 3
        else:
            chars.add(body[at])
            at += 1
    return ("!" if negated else "", frozenset(chars), tuple(ranges))


def _in(token: CharClass | None, ch: str) -> bool:
    if token is None:
        return ch != "/"
    negated, chars, ranges = token
    found = ch in chars or any(low <= ch <= high for low, high in ranges)
    return found != bool(negated)


def _chars_meet(a: CharClass | None, b: CharClass | None) -> bool:
    """Whether one character matches both single-character tokens (when unsure: True, so that
    an issue waits rather than conflicts)."""
    if a is None or b is None:
        return True
    if a[0] and b[0]:
        return True      # two negated classes: some character is named by neither
    if a[0] or b[0]:
        plain = b if a[0] else a
        if plain[2]:
            return True   # a range against a negated class: conservatively meets
        return any(_in(a, c) and _in(b, c) for c in plain[1])
    # two plain classes: they share a character, or one's range holds an end of the other's
    candidates = set(a[1]) | set(b[1]) | {end for pair in a[2] + b[2] for end in pair}
    return any(_in(a, c) and _in(b, c) for c in candidates)


def _segments_meet(a: str, b: str) -> bool:
    ta, tb = _tokens(a), _tokens(b)

    @lru_cache(maxsize=None)
    def meet(i: int, j: int) -> bool:
        if i == len(ta) and j == len(tb):
            return True
        if i < len(ta) and ta[i] == "*":
            return meet(i + 1, j) or (j < len(tb) and meet(i, j + 1))
        if j < len(tb) and tb[j] == "*":
            return meet(i, j + 1) or (i < len(ta) and meet(i + 1, j))
        if i == len(ta) or j == len(tb):
            return False
        x, y = ta[i], tb[j]   # not "*": handled above (the isinstance checks say so to mypy)
        return not isinstance(x, str) and not isinstance(y, str) and _chars_meet(x, y) and meet(i + 1, j + 1)

    return meet(0, 0)


def _split(glob: str) -> tuple[str, ...]:
    segments = tuple(glob.rstrip("/").split("/"))
    return segments + ("**",) if glob.endswith("/") else segments


def _escaped(path: str) -> str:
    """A path as a glob that matches only itself."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in path)


@lru_cache(maxsize=4096)
def overlap(a: str, b: str) -> bool:
    """Whether some path matches both globs."""
    return _paths_meet(_split(a), _split(b))


def matches(glob: str, path: str) -> bool:
    """Whether the file at `path` (relative, `/`-separated) is one `glob` covers; a `path` ending
    in `/` is a folder whose files are not listed one by one: whether `glob` may cover one of them."""
    return _paths_meet(_split(glob), _split(_escaped(path)))


def _paths_meet(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    @lru_cache(maxsize=None)
    def meet(i: int, j: int) -> bool:
        if i == len(sa) and j == len(sb):
            return True
        if i < len(sa) and sa[i] == "**":
            return meet(i + 1, j) or (j < len(sb) and meet(i, j + 1))
        if j < len(sb) and sb[j] == "**":
            return meet(i, j + 1) or (i < len(sa) and meet(i + 1, j))
        if i == len(sa) or j == len(sb):
            return False
        return _segments_meet(sa[i], sb[j]) and meet(i + 1, j + 1)

    return meet(0, 0)
