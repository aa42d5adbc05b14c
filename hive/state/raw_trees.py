"""Tree objects as git stores them: one record `<mode> <name>\\0<20-byte id>` per entry, parsed in C.

The trust check and the index's walk of what changed read the same two trees one after the
other (the state adopted before, the new tip), and a daemon catching up commit after commit reads
the last tip again as the next base. The records of the last few trees read are kept by tree id —
an id names one content — so each big folder (`issues/` holds an entry per live issue) is parsed
once. pygit2 is not imported here: only an object database's `read` is used.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

TREE = 2                    # git's object type of a tree (pygit2.enums.ObjectType.TREE)
KEPT = 8                    # trees whose records are kept
RECORD = re.compile(rb"[0-9]+ [^\0]*\0.{20}", re.DOTALL)

_kept: OrderedDict[str, list[bytes]] = OrderedDict()
_lock = threading.Lock()


class NotATree(ValueError):
    """An object that is not a tree."""


class MalformedTree(NotATree):
    """A tree object whose entries do not parse."""


def records(odb: Any, tree: str) -> list[bytes]:
    """The entry records of tree object `tree` (hex id), in git's order; the list is shared: do
    not change it. NotATree for another kind of object, MalformedTree for a tree that does not
    parse; for a missing object,
    what the object database raises."""
    with _lock:
        found = _kept.get(tree)
        if found is not None:
            _kept.move_to_end(tree)
            return found
    kind, raw = odb.read(tree)
    if kind != TREE:
        raise NotATree("an object that is not a tree")
    found = parse(raw)
    with _lock:
        _kept[tree] = found
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return found


def parse(raw: bytes) -> list[bytes]:
    """The entry records of a tree object's bytes, a new list; MalformedTree unless they tile it."""
    found = RECORD.findall(raw)
    if sum(map(len, found)) != len(raw):      # the matches did not tile the object
        raise MalformedTree("a malformed tree object")
    return found


def split(record: bytes) -> tuple[bytes, bytes, bytes]:
    """(mode, name, raw 20-byte id) of one record."""
    space = record.index(b" ")
    return record[:space], record[space + 1:-21], record[-20:]
