"""A command line made ready to start in a jail: argv, environment, process bound, network."""

from __future__ import annotations

from dataclasses import dataclass, field

from hive import git
from hive.errors import HiveError
from hive.jail import mechanisms
from hive.jail.mechanisms import support
from hive.jail.environment import jail_environment
from hive.jail.limits import ProcessCap
from hive.jail.network import Gate, NoNetwork, open_gate
from hive.jail.spec import JailSpec


class NoJail(HiveError):
    """A jail was asked for and cannot be built here (the message names the cause and the fix)."""


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cap: ProcessCap | None = field(default=None, repr=False)
    gate: Gate | None = field(default=None, repr=False)

    def members(self) -> list[int] | None:
        """The live processes the command's cgroup holds — once the command's first process has
        exited, every live one it started, as that process joined the cgroup before it started
        any (None: no cgroup to ask)."""
        return self.cap.members() if self.cap is not None else None

    def release(self) -> None:
        """After the command and everything it started have ended."""
        if self.cap is not None:
            self.cap.release()
        if self.gate is not None:
            self.gate.close()


def prepare(argv: list[str], *, cwd: str, env: dict[str, str], jail: JailSpec | None,
            strict: bool = True) -> Launch:
    """`argv` as it is (no jail), or wrapped in `jail`. Where no jail can be built: NoJail, or
    (not `strict`) `argv` unjailed with the jail's environment."""
    if jail is None:
        return Launch(list(argv), dict(env))
    inside = {**jail_environment(env, jail.provider_env), **dict(jail.env)}
    if jail.git_config:
        inside.update(git.config_env(dict(jail.git_config), inside))
    found = support(jail.mechanism)
    if not found.ok:
        if not strict:
            return Launch(list(argv), inside)
        raise NoJail(f"{found.reason} — {found.fix}")
    gate = None
    if jail.endpoints:
        try:
            gate = open_gate(jail.endpoints, env)
        except NoNetwork as e:
            raise NoJail(str(e)) from None
        inside.update(gate.env)
        argv = [*gate.relay, *argv]
    cap = ProcessCap.make(jail.max_processes)
    line = mechanisms.command(found, jail, cap.bounded(argv), cwd, inside, gate.folder if gate else "")
    return Launch(cap.joined(line), {}, cap, gate)
