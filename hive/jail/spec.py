"""What a jail lets a command touch: the record every jail implementation builds from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

DEFAULT_MAX_PROCESSES = 512       # processes (threads count too) a jailed command may run at once

# The user's credentials and keys: hidden wherever a jail would otherwise show them.
CREDENTIALS = (".ssh", ".gnupg", ".aws", ".config/gh", ".config/gcloud", ".git-credentials",
               ".netrc", ".docker", ".kube", ".npmrc", ".pypirc", ".cargo/credentials",
               ".cargo/credentials.toml", ".local/share/keyrings", ".password-store")


@dataclass(frozen=True)
class JailSpec:
    """Paths are absolute; each is resolved (symlinks followed) when the jail is built.

    Everything of the system not named here is read-only. `hidden` paths look empty (and are
    read-only) inside; `scratch` ones look empty and are writable (the jail's own /tmp);
    `readable` ones are shown read-only again inside a hidden one (the CLI's own install);
    `writable` ones are bound read-write; `frozen` ones are read-only inside a writable one
    (a worktree's `.git` file, which names the repository it belongs to). `views` are
    (source, destination) pairs: the folder or file `source` shown read-only at `destination`
    (which need not exist outside), `source` opened by hive without following a link (a link
    there shows nothing) and handed to the mechanism open (`View`), so that what is shown is what
    hive opened, whatever the path leads to a moment later.

    The jail has a network of its own with nothing in it: `endpoints` (URLs: scheme, host, port)
    are the only places outside it can reach, through hive's relay (network.py), and
    `provider_env` the only environment names beyond the common allowlist it sees (exact names,
    or prefixes ending in `*`): what the backend's CLI needs to reach its provider."""

    writable: tuple[str, ...]
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()
    views: tuple[tuple[str, str], ...] = ()
    max_processes: int = DEFAULT_MAX_PROCESSES
    env: tuple[tuple[str, str], ...] = ()     # set inside whatever the caller's environment says
    git_config: tuple[tuple[str, str], ...] = ()   # git settings inside, after the environment's own
    endpoints: tuple[str, ...] = ()
    provider_env: tuple[str, ...] = ()
    home: str = field(default_factory=lambda: os.path.expanduser("~"))
    mechanism: str = "on"                      # what builds it (`mechanisms`): "on", the first that works here

    def extended(self, *, writable: tuple[str, ...] = (), readable: tuple[str, ...] = (),
                 endpoints: tuple[str, ...] = (), provider_env: tuple[str, ...] = ()) -> JailSpec:
        """The same jail with what a backend's CLI needs: its config folder, its install, its
        provider's endpoints and environment."""
        return replace(self, writable=(*self.writable, *writable), readable=(*self.readable, *readable),
                       endpoints=(*self.endpoints, *endpoints),
                       provider_env=(*self.provider_env, *provider_env))

    def credentials(self) -> tuple[str, ...]:
        return tuple(os.path.join(self.home, name) for name in CREDENTIALS)


@dataclass(frozen=True)
class View:
    """One of `JailSpec.views` made ready: `source` open (`fd`, an O_PATH descriptor of a folder
    or a regular file), to be shown read-only at `destination`."""

    fd: int
    source: str          # where the descriptor led when it was opened (host sockets are checked there)
    destination: str


def descriptor_path(fd: int) -> str:
    """Where an open descriptor leads now, as the kernel resolves it; "" where it gives no answer
    (no /proc) or the file is gone."""
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
    return resolved if resolved.startswith("/") and not resolved.endswith(" (deleted)") else ""
