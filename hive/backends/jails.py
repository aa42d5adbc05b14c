"""Which jail a backend's session runs in: the orchestrator's, plus what the CLI itself needs.

The orchestrator hands the jail in `SessionSpec.jail` (None only with `sandbox = "off"`). A real
agent CLI (claude, codex) runs in it or not at all: `hive.jail.NoJail` when none can be built. The
scripted test agents run in it wherever a jail can be built, else unjailed with one warning per
process, so `git hive demo` works on any machine.
"""

from __future__ import annotations

import os
import shutil
import sys

from hive.backends import registry
from hive.backends.base import SessionSpec
from hive.jail import JailSpec, support

_warned: list[bool] = []


def cli_install(program: str) -> tuple[str, ...]:
    """The folder an agent CLI is installed in (the whole npm tree when it is an npm package)."""
    found = shutil.which(program) or program
    real = os.path.realpath(found)
    shown = [os.path.dirname(real), os.path.dirname(os.path.abspath(found))]
    for path in (os.path.abspath(found), real):
        marker = f"{os.sep}node_modules{os.sep}"
        if marker in path:
            shown.append(path[:path.index(marker) + len(marker) - 1])
    return tuple(dict.fromkeys(shown))


def session_jail(spec: SessionSpec, backend: str, *, writable: tuple[str, ...] = (),
                 readable: tuple[str, ...] = (), endpoints: tuple[str, ...] = (),
                 provider_env: tuple[str, ...] = ()) -> JailSpec | None:
    """The jail to start the `backend`'s session process in, or None (unjailed): the
    orchestrator's, with what the CLI needs to read and write, the provider URLs it may reach and
    the environment names it gets (nothing of the network or of the provider for the scripted
    agents). An untrusted CLI (the registry says which) gets it or does not start (`NoJail`)."""
    if spec.jail is None:
        return None
    found = support(spec.jail.mechanism)
    if not registry.kind(backend).untrusted and not found.ok:
        if not _warned:
            _warned.append(True)
            print(f"git hive: warning: scripted agents run unjailed: {found.reason}", file=sys.stderr)
        return None
    return spec.jail.extended(writable=writable, readable=readable, endpoints=endpoints,
                              provider_env=provider_env)
