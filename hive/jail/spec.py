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
    (a worktree's `.git` file, which names the repository it belongs to)."""

    writable: tuple[str, ...]
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()
    max_processes: int = DEFAULT_MAX_PROCESSES
    env: tuple[tuple[str, str], ...] = ()     # set inside whatever the caller's environment says
    home: str = field(default_factory=lambda: os.path.expanduser("~"))

    def extended(self, *, writable: tuple[str, ...] = (), readable: tuple[str, ...] = ()) -> JailSpec:
        """The same jail with more paths a backend's CLI needs (its config folder, its install)."""
        return replace(self, writable=(*self.writable, *writable), readable=(*self.readable, *readable))

    def credentials(self) -> tuple[str, ...]:
        return tuple(os.path.join(self.home, name) for name in CREDENTIALS)
