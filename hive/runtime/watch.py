"""What `git hive status --watch` waits for: a change of what it shows, told by the files it reads.

Watched, in `<git-common-dir>/hive/` only (not recursively: the worktrees are there):
- `ref-events`: every state commit appends to it (hive's writers and the git hook);
- `runtime.db` and its WAL: agents, tokens, the merge queue, the daemon's pid and its run's
  progress. A daemon holding its connection writes to the WAL; a short-lived writer (a CLI
  command, no daemon running) checkpoints into `runtime.db` when it closes.

The watcher must keep one connection to runtime.db open while it watches: closing a connection
writes the WAL (SQLite's close-time checkpoint), so a reader that opened and closed the database
on each refresh would wake itself forever. For the same reason the lock file is not watched
(`DaemonLock.holder()` opens it for writing). Files being created or deleted are not news: SQLite
creates and deletes the WAL and shared-memory files as connections come and go.
"""

from __future__ import annotations

import threading
from typing import Iterator

from hive import git

RUNTIME_FILES = ("runtime.db", "runtime.db-wal")


def changes(paths: git.RepoPaths, timeout_ms: int = 0, stop: threading.Event | None = None) -> Iterator[bool]:
    """Yield True after each batch of changes of what status shows; with `timeout_ms`, also
    False when that long passes without any (for what ages by itself: agents' ages). Ends when
    `stop` is set."""
    from watchfiles import Change, watch

    wanted = {str(paths.hive_dir / name) for name in RUNTIME_FILES} | {str(paths.ref_events)}
    for batch in watch(paths.make_hive_dir(), recursive=False, watch_filter=None, debounce=50, step=20,
                       rust_timeout=timeout_ms, yield_on_timeout=bool(timeout_ms), stop_event=stop):
        if not batch:
            yield False
        elif any(path in wanted and (kind == Change.modified or path == str(paths.ref_events))
                 for kind, path in batch):
            yield True
