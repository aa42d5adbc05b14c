"""A command line made ready to start in a jail: argv, environment, process bound, network."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass, field
from typing import Any

from hive import git
from hive.errors import HiveError
from hive.jail import mechanisms
from hive.jail.mechanisms import support
from hive.jail.environment import jail_environment
from hive.jail.limits import ProcessCap
from hive.jail.network import Gate, NoNetwork, open_gate
from hive.jail.spec import JailSpec, View, descriptor_path


class NoJail(HiveError):
    """A jail was asked for and cannot be built here (the message names the cause and the fix)."""


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cap: ProcessCap | None = field(default=None, repr=False)
    gate: Gate | None = field(default=None, repr=False)
    fds: tuple[int, ...] = ()   # descriptors the command line names (the jail's views): to pass

    def popen(self, **options: Any) -> subprocess.Popen[bytes]:
        """Start the command (`subprocess.Popen` `options`, the working directory among them)
        with its descriptors, then close them here: the jail holds what they opened."""
        try:
            return subprocess.Popen(self.argv, env=self.env, pass_fds=self.fds, **options)
        finally:
            self._close_fds()

    def _close_fds(self) -> None:
        fds, self.fds = self.fds, ()
        for fd in fds:
            os.close(fd)

    def members(self) -> list[int] | None:
        """The live processes the command's cgroup holds — once the command's first process has
        exited, every live one it started, as that process joined the cgroup before it started
        any (None: no cgroup to ask)."""
        return self.cap.members() if self.cap is not None else None

    def release(self) -> None:
        """After the command and everything it started have ended (or it could not start)."""
        self._close_fds()
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
    views = open_views(jail.views)
    launch = Launch([], {}, gate=gate, fds=tuple(view.fd for view in views))
    try:
        cap = launch.cap = ProcessCap.make(jail.max_processes)
        line = mechanisms.command(found, jail, cap.bounded(argv), cwd, inside, gate.folder if gate else "", views)
    except BaseException:
        launch.release()
        raise
    launch.argv = cap.joined(line)
    return launch


def open_views(views: tuple[tuple[str, str], ...]) -> tuple[View, ...]:
    """Each (source, destination) of `JailSpec.views` whose source is a folder or a regular file,
    opened without following a link; the others (missing, a link, a socket, deleted meanwhile...)
    left out."""
    opened = []
    for source, destination in views:
        try:
            fd = os.open(source, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            mode = 0
        where = descriptor_path(fd)
        if (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) and where:
            opened.append(View(fd, where, destination))
        else:
            os.close(fd)
    return tuple(opened)
