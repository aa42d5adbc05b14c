"""The OS jail every agent process, and every command hive runs for an agent, starts in.

`JailSpec` (spec.py) says what a jail lets a command touch; `roles.py` builds it for a worktree
(workers, the refinery, test commands) or the Queen's plan directory; `launch.prepare` turns a
command line into one that runs inside it, built by a mechanism of `mechanisms.py` (bubblewrap:
bubblewrap.py the mounts and namespaces, detect.py its probe; environment.py: the allowlisted
environment; limits.py: the process bound); `support(choice)` says once per process whether this
machine can build one, and if not why and what to do.

The names below are loaded when first used: `hive.config` reads the mechanisms' names on every
command, and that must not start the whole jail.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hive.jail.launch import Launch, NoJail, prepare
    from hive.jail.mechanisms import Support, support
    from hive.jail.network import sweep_gates
    from hive.jail.spec import JailSpec

_HOME = {"JailSpec": "hive.jail.spec", "Launch": "hive.jail.launch", "NoJail": "hive.jail.launch",
         "prepare": "hive.jail.launch", "Support": "hive.jail.mechanisms", "support": "hive.jail.mechanisms",
         "sweep_gates": "hive.jail.network"}

__all__ = ["JailSpec", "Launch", "NoJail", "Support", "prepare", "support", "sweep_gates"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'hive.jail' has no attribute {name!r}")
