"""Runtime state that is never shared: agents, attempts, token usage, merge queue, daemon lock.

Lives in `<git-common-dir>/hive/runtime.db` (SQLite, WAL). The daemon writes it as things happen;
`git hive status` reads it. Unlike the index it is not a cache of `hive/state`: it is what lets a
restarted daemon know which agent processes it left behind and how much retry budget an issue
has used. Losing it loses no issue: in-progress issues are then recovered as failed attempts.

One module per table (agents, budgets, merge_queue, kv), the numbered migrations (schema), the
`Runtime` handle over them (database), the daemon lock and the pid checks.
"""

from hive.runtime.budgets import Budget
from hive.runtime.database import Runtime
from hive.runtime.lock import DaemonLock
from hive.runtime.merge_queue import Entry, MergeQueue
from hive.runtime.processes import is_alive, process_start_time

__all__ = ["Budget", "DaemonLock", "Entry", "MergeQueue", "Runtime", "is_alive", "process_start_time"]
