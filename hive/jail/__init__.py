"""The OS jail every agent process, and every command hive runs for an agent, starts in.

`JailSpec` (spec.py) says what a jail lets a command touch; `roles.py` builds it for a worktree
(workers, the refinery, test commands) or the Queen's plan directory; `launch.prepare` turns a
command line into one that runs inside it (bubblewrap.py: the mounts and namespaces;
environment.py: the allowlisted environment; limits.py: the process bound); `detect.support`
says once per process whether this machine can build one, and if not why and what to do.
"""

from hive.jail.detect import Support, support
from hive.jail.launch import Launch, NoJail, prepare
from hive.jail.spec import JailSpec

__all__ = ["JailSpec", "Launch", "NoJail", "Support", "prepare", "support"]
