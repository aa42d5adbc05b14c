"""Whether an agent process recorded in the runtime database is still the one that was started."""

from __future__ import annotations


def process_start_time(pid: int) -> str:
    """The kernel's start time of a process (guards against pid reuse); '' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def is_alive(pid: int, start: str = "") -> bool:
    if pid <= 0:
        return False
    current = process_start_time(pid)
    return bool(current) and (not start or current == start)
