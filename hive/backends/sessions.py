"""The read side of a backend's sessions, the same for every backend.

A backend keeps its sessions in `self._sessions` (id → its own session record). Each record has
`id`, `state()`, `usage`, `proc` (with a `pid`, or None), `last_activity`, `messages` (the
transcript) and `permissions` (requests waiting for an answer). `SessionBook` answers the
protocol's status, listing, transcript and pending-permission calls from them; the backends
differ only in how they drive their CLI.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hive.backends.base import PermissionRequest, SessionStatus


class SessionBook:
    name: str
    _sessions: dict[str, Any]

    def _get(self, session_id: str) -> Any:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"no {self.name} session {session_id!r}") from None

    def _status(self, s: Any) -> SessionStatus:
        return SessionStatus(session_id=s.id, state=s.state(), usage=replace(s.usage),
                             pid=s.proc.pid if s.proc is not None else None, last_activity=s.last_activity)

    async def get_session_status(self, session_id: str) -> SessionStatus:
        return self._status(self._get(session_id))

    async def list_sessions(self) -> list[SessionStatus]:
        return [self._status(s) for s in self._sessions.values()]

    async def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        return [dict(m) for m in self._get(session_id).messages]

    async def get_pending_permissions(self, session_id: str) -> list[PermissionRequest]:
        return list(self._get(session_id).permissions.values())
