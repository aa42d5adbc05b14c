"""The bubblewrap mechanism: the jail as a `bwrap` command line (its probe: detect.py).

Why bubblewrap rather than Landlock alone: a jail must also *hide* paths (credentials, the
runtime folder, other repositories) and end everything the agent started when it ends, and must
keep a writable folder from reaching into what it contains (a worktree's `.git` file). Mount
namespaces do all three (tmpfs over a hidden folder, a read-only bind inside a writable one, a
PID namespace whose end kills every process in it); Landlock only restricts access, cannot make a
path look empty, and cannot forbid a deeper path inside an allowed one. bwrap starts in a few
milliseconds and is one small package (or the copy the codex npm package ships).

The mounts, in the order bwrap needs (a deeper path after the one containing it):
the system read-only, a fresh /dev and /proc, then per path — shallowest first — scratch (an
empty tmpfs), hidden (an empty tmpfs, made read-only once everything inside it is mounted; an
empty read-only file for a file), readable (read-only), writable (read-write), frozen (read-only
again), views (what a descriptor hive opened leads to, read-only at another path).

Every namespace is the jail's own, the user namespace included, and every capability is dropped
in it: started by root, the jail is no more root than one started by a user (no remount, no
umount, no write where the mounts say read-only). The network namespace holds only a loopback;
the ways out a backend needs are hive's relay (network.py), whose socket folder is shown
read-only. The host's UNIX sockets are out of reach: abstract ones belong to the host's network
namespace, /run and /var/run (docker.sock, the user's ssh and gpg agents under /run/user) are
empty, and every other path socket the host listens on (`/proc/net/unix`) is covered by an empty
file wherever the jail would show it.
"""

from __future__ import annotations

import os

from hive.jail import detect
from hive.jail.detect import FLAGS
from hive.jail.spec import JailSpec, View, descriptor_path

SCRATCH, HIDDEN, READABLE, WRITABLE, FROZEN, VIEW = range(6)
RUNTIME_DIRS = ("/run", "/var/run")      # hidden in every jail: the host's sockets live there

# the mechanism (hive.jail.mechanisms.JailMechanism): `command` below, the rest is detect.py's
PROGRAM_ENV = detect.PROGRAM_ENV
probe = detect.support
programs = detect.programs


def host_sockets() -> list[str]:
    """The paths of the UNIX sockets listening in hive's network namespace."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            rows = table.read().splitlines()[1:]
    except OSError:
        return []
    return [fields[7] for fields in (row.split(None, 7) for row in rows)
            if len(fields) == 8 and fields[7].startswith("/")]


def _mounts(spec: JailSpec, gate_folder: str = "", views: tuple[View, ...] = ()) -> list[tuple[int, int, str]]:
    """(depth, kind, path) of every mount, in bwrap order; paths that do not exist are left out,
    and so is a view onto a path another mount takes or of a source holding a host socket."""
    chosen: dict[tuple[int, str], None] = {}
    for kind, paths in ((SCRATCH, spec.scratch), (HIDDEN, (*RUNTIME_DIRS, *spec.hidden)),
                        (READABLE, (*spec.readable, gate_folder)),
                        (WRITABLE, spec.writable), (FROZEN, spec.frozen)):
        for path in paths:
            if path and os.path.lexists(path):
                chosen[(kind, real_path(path))] = None
    shown = [p for kind, p in chosen if kind in (READABLE, WRITABLE)]
    for secret in spec.credentials():       # a credential inside something shown is hidden again
        if not os.path.lexists(secret):
            continue
        real = real_path(secret)
        if os.path.lexists(real) and any(_inside(real, p) for p in shown):
            chosen[(HIDDEN, real)] = None
    sockets = host_sockets()
    for socket_path in sockets:             # a host socket the jail would show is covered
        if gate_folder and _inside(socket_path, gate_folder):
            continue
        if os.path.lexists(socket_path) and _shown(socket_path, chosen):
            chosen[(HIDDEN, socket_path)] = None
    taken = {path for _, path in chosen}
    for view in views:
        if view.destination not in taken and not any(_inside(socket_path, view.source) for socket_path in sockets):
            chosen[(VIEW, view.destination)] = None
            taken.add(view.destination)
    return _needed(sorted((path.count(os.sep), kind, path) for kind, path in chosen))


def real_path(path: str) -> str:
    """`os.path.realpath(path)`, resolved by the kernel in one `open(O_PATH)` (which opens no file
    for reading: a FIFO does not block it) where the path leads somewhere: Python resolves a long
    path one `lstat` per component, and a jail resolves some 25 paths at each start. Python's
    answer where the kernel gives none (a dangling link, no /proc)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        return descriptor_path(fd) or os.path.realpath(path)
    finally:
        os.close(fd)


def _shown(path: str, chosen: dict[tuple[int, str], None]) -> bool:
    """Whether `path` is visible inside: the deepest mount containing it is not an empty one."""
    deepest = (-1, READABLE)                 # `/` itself is bound read-only
    for kind, folder in chosen:
        if _inside(path, folder) and folder.count(os.sep) >= deepest[0]:
            deepest = max(deepest, (folder.count(os.sep), kind))
    return deepest[1] not in (SCRATCH, HIDDEN)


def _needed(mounts: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Leave out the mounts that change nothing (each costs bwrap time at every start): a
    read-only one where everything is read-only already (the system, or a shown folder), a
    writable one inside a writable one."""
    kept: list[tuple[int, int, str]] = []
    read_only = (READABLE, FROZEN)
    for depth, kind, path in mounts:
        before = READABLE                   # `/` itself is bound read-only
        for _, other, folder in kept:       # in mount order: the last one covering `path` wins
            if _inside(path, folder):
                before = other
        if kind in read_only and before in read_only:
            continue
        if kind == WRITABLE and before == WRITABLE:
            continue
        kept.append((depth, kind, path))
    return kept


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def command(program: str, spec: JailSpec, argv: list[str], cwd: str, env: dict[str, str],
            gate_folder: str = "", views: tuple[View, ...] = ()) -> list[str]:
    """`argv` run inside the jail by the `bwrap` `program`, in `cwd`, with exactly `env`;
    `gate_folder`: the sockets of its relay (network.py), shown read-only; `views` shown by their
    descriptors (which the command must be given)."""
    line = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *FLAGS, "--clearenv"]
    read_only_tmpfs = []
    opened = {view.destination: view.fd for view in views}
    for _, kind, path in _mounts(spec, gate_folder, views):
        if kind == VIEW:
            line += ["--ro-bind-fd", str(opened[path]), path]
        elif kind in (HIDDEN, SCRATCH) and os.path.isdir(path):
            line += ["--tmpfs", path]
            if kind == HIDDEN:
                read_only_tmpfs.append(path)
        elif kind in (HIDDEN, SCRATCH):
            line += ["--ro-bind", "/dev/null", path]
        elif kind == WRITABLE:
            line += ["--bind", path, path]
        else:
            line += ["--ro-bind", path, path]
    for path in read_only_tmpfs:        # last: the mounts inside them needed their mount points made
        line += ["--remount-ro", path]
    for name, value in sorted(env.items()):
        line += ["--setenv", name, value]
    line += ["--chdir", real_path(cwd), "--", *argv]
    return line
