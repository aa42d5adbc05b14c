"""The agent backends hive knows, by name: the choices of `run --backend` and `plan --backend`."""

from __future__ import annotations

from hive.backends.registry import names

__all__ = ["names"]
