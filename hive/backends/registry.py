"""Backend names → backend classes; the one place that knows which backends exist.

A new backend is one module under `hive/backends/` whose class follows `base.Backend` and has a
`from_settings` class method, plus one line in `BACKENDS`. Only the chosen backend's module is
imported (a `git hive` command that starts no agent never pays for the others).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from hive.backends.base import Backend

# name → "module:Class"
BACKENDS: dict[str, str] = {
    "claude": "hive.backends.claude:ClaudeBackend",
    "codex": "hive.backends.codex:CodexBackend",
    "scripted": "hive.backends.scripted:ScriptedBackend",
}


class BackendSettings(Protocol):
    """What a backend reads of hive's configuration (`hive.config.Config` has all of it)."""

    scripted_script: str
    claude_command: str
    codex_command: str
    codex: dict[str, Any]

    def backend_for(self, role: str) -> str: ...


def backend_class(name: str) -> type:
    """The class registered as `name`; ValueError for an unknown name."""
    try:
        module_name, _, class_name = BACKENDS[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (one of: {', '.join(sorted(BACKENDS))})") from None
    return getattr(importlib.import_module(module_name), class_name)


def load_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name with its constructor's options."""
    return backend_class(name)(**options)


def backend_for_role(config: BackendSettings, role: str, hive_dir: str, repo_root: str) -> Backend:
    """The backend configured for `role` (config keys `backend`, `<role>_backend`, ...)."""
    return backend_class(config.backend_for(role)).from_settings(config, hive_dir=hive_dir,
                                                                 repo_root=repo_root)
