"""`git hive`: the entry point — dispatch, and the one-line errors every command ends with.

A short command is first offered to this user's warm command server (`hive.cli.served`), which
runs it without paying for the imports again; where none answers it runs here, and a server is
started for the commands after it. (So this module loads nothing it can do without, `typing`
included.)

`git hive list --json` (what scripts and status bars run most often) is dispatched here without
click, whose import is a good part of that command's start-up; every other command line goes to
the click group (`hive.cli.group`). Both paths list through `hive.cli.listing`.
"""

from __future__ import annotations

import os
import sys

from hive.cli import served
from hive.errors import HiveError

FAST_LISTING = ["list", "--json"]


def main(argv: list[str] | None = None) -> object:
    args = sys.argv[1:] if argv is None else list(argv)
    start_server = ""
    try:
        if argv is None and served.wanted(args):   # the process `git-hive` started, not a served child
            start_server = served.hand_over(args)
        if args == FAST_LISTING:
            from hive.cli import listing

            return listing.list_json()
        from hive.cli import group

        return group.run(args)
    except HiveError as exc:
        print(f"git hive: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:   # a full disk, a file that cannot be read: the cause, in one line
        where = f": {exc.filename}" if exc.filename else ""
        print(f"git hive: {exc.strerror or exc}{where}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # a bug: still one line; HIVE_TRACEBACK=1 shows where
        if os.environ.get("HIVE_TRACEBACK"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"git hive: internal error: {type(exc).__name__}: {first} "
              "(HIVE_TRACEBACK=1 shows where)", file=sys.stderr)
        sys.exit(1)
    finally:
        if start_server:
            served.start(start_server)
