"""`git hive ui` through the API: Datasette (the optional extra `ui`) on what `hive.browse`
prepares — the index read-only, a view of the runtime, a snapshot of the history — served in this
process on 127.0.0.1 behind `browse.guarded` (the printed URL's token, a Host allowlist)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Callable

from hive import browse
from hive.errors import HiveError
from hive.project import Project
from hive.runtime import Runtime

INSTALL_HINT = "Datasette is not installed (git hive ui needs it): pip install 'git-hive[ui]'"

__all__ = ["INSTALL_HINT", "serve"]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # ValueError: blocked (None in sys.modules)
        return False


def _databases(path: Path | str | None) -> tuple[Path, list[Path]]:
    project = Project.open(path)
    try:
        index_db = browse.databases(project)
        runtime = Runtime(project.paths)
        runtime.agents()   # opening it migrates it: a repository no daemon ran in yet has its tables too
        runtime.close()
        folder = project.paths.hive_dir / "ui"
        return index_db, [browse.runtime_view(project, folder), browse.snapshot(project, folder)]
    finally:
        project.close()


def serve(port: int, announce: Callable[[str], None], path: Path | str | None = None) -> None:
    """Serve the repository at `path` (default: here) until Ctrl-C or `kill`; `announce` is told
    the URL to open (it carries the token: anything else is refused)."""
    if not _installed("datasette"):
        raise HiveError(INSTALL_HINT)
    import uvicorn
    from datasette.app import Datasette

    index_db, immutables = _databases(path)
    ds = Datasette([str(index_db)], immutables=[str(p) for p in immutables], metadata=browse.metadata(),
                   settings={"sql_time_limit_ms": 5000})
    asyncio.run(ds.invoke_startup())
    token = browse.new_token()
    announce(f"http://{browse.HOST}:{port}/?{browse.TOKEN_PARAMETER}={token}")
    uvicorn.run(browse.guarded(ds.app(), token, browse.allowed_hosts(port)), host=browse.HOST, port=port,
                log_level="warning", lifespan="on", workers=1)
