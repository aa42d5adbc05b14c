"""The jail mechanisms: the one place that knows which exist and what each one is.

A mechanism is a way to build the jail a `JailSpec` describes. It has a probe (can it build one
here, tried for real; if not, why and what the user can do: a `Support`) and a command (the
command line that runs `argv` inside the jail, given the program its probe found). A new one is
its module(s) plus one `Mechanism` line in `MECHANISMS`; the `sandbox` setting's choices, the
start-up refusal, doctor's jail line and the jail tests (run on every mechanism that works here)
all read it from here. `sandbox = "on"` takes the first that works here, in this order; a
mechanism named there is that one or none (a refusal naming the fix, never another one).

Only the names live at import time (config reads them on every command): a mechanism's modules
are imported when it is probed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hive.jail.spec import JailSpec

ON, OFF = "on", "off"


@dataclass(frozen=True)
class Support:
    """What a probe found: whether its mechanism builds a jail here, with which program."""
    ok: bool
    mechanism: str = ""
    program: str = ""              # what the command runs (bubblewrap's `bwrap`)
    reason: str = ""               # why no jail can be built (when not ok)
    fix: str = ""                  # what the user can do about it
    process_limit: str = ""        # what bounds a jail's processes ("" when nothing does)

    def describe(self) -> str:
        if not self.ok:
            return f"agents cannot be jailed: {self.reason} — {self.fix}"
        bound = self.process_limit or "no process limit (root without a writable pids cgroup)"
        return f"agents run jailed ({self.mechanism} {self.program}; processes bounded by {bound})"


@dataclass(frozen=True)
class Mechanism:
    name: str
    probe: str       # "module:function() -> Support", once per process
    command: str     # "module:function(program, spec, argv, cwd, env, gate_folder) -> argv"


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("bubblewrap", probe="hive.jail.detect:support", command="hive.jail.bubblewrap:command"),
)}


def names() -> tuple[str, ...]:
    return tuple(MECHANISMS)


def choices() -> tuple[str, ...]:
    """What `sandbox` may say: on, off, or a mechanism's name."""
    return (ON, OFF, *MECHANISMS)


def _load(target: str) -> Any:
    module_name, _, function = target.partition(":")
    return getattr(importlib.import_module(module_name), function)


def support(choice: str = ON) -> Support:
    """Whether `choice` (on, or a mechanism's name) builds a jail here: for "on", the first
    mechanism that does, else the first one's reason and fix (each probe runs once per process)."""
    if choice != ON and choice not in MECHANISMS:
        return Support(False, choice, reason=f"no jail mechanism {choice!r}",
                       fix=f'set sandbox to one of: {", ".join(choices())}')
    tried: list[Support] = []
    for mechanism in (MECHANISMS.values() if choice == ON else (MECHANISMS[choice],)):
        found: Support = _load(mechanism.probe)()
        if found.ok:
            return found
        tried.append(found)
    return tried[0]


def command(found: Support, spec: JailSpec, argv: list[str], cwd: str, env: dict[str, str],
            gate_folder: str = "") -> list[str]:
    """`argv` run inside `spec` by the mechanism `found` probed."""
    build = _load(MECHANISMS[found.mechanism].command)
    line: list[str] = build(found.program, spec, argv, cwd, env, gate_folder)
    return line
