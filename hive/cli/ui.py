"""git hive ui"""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import click

from hive.cli.params import Whole

from hive.errors import HiveError

INSTALL_HINT = "Datasette is not installed (git hive ui needs it): pip install 'git-hive[ui]'"


@click.command()
@click.option("--port", type=Whole(1, 65535), default=8001, show_default=True,
              help="Serve on 127.0.0.1 at this port.")
def ui(port: int) -> None:
    """Browse the queue, costs, escalations and merges in Datasette (127.0.0.1 only, at the URL
    with a token it prints; Ctrl-C ends it)."""
    if not _installed("datasette"):
        raise HiveError(INSTALL_HINT)
    from hive import browse
    from hive.project import Project
    from hive.runtime import Runtime

    project = Project.open()
    index_db = browse.databases(project)
    runtime = Runtime(project.paths)
    runtime.agents()   # opening it migrates it: a repository no daemon ran in yet has its tables too
    runtime.close()
    folder = project.paths.hive_dir / "ui"
    runtime_db = browse.runtime_view(project, folder)
    history_db = browse.snapshot(project, folder)
    project.close()
    _serve(index_db, [runtime_db, history_db], browse.metadata(), port)


def _serve(index_db, immutables, metadata: dict, port: int) -> None:
    """Datasette in this process behind `browse.guarded`: Ctrl-C and `kill` end it."""
    import uvicorn
    from datasette.app import Datasette

    from hive import browse

    ds = Datasette([str(index_db)], immutables=[str(p) for p in immutables], metadata=metadata,
                   settings={"sql_time_limit_ms": 5000})
    asyncio.run(ds.invoke_startup())
    token = browse.new_token()
    click.echo(f"git hive ui: http://{browse.HOST}:{port}/?{browse.TOKEN_PARAMETER}={token} "
               "(this URL only: Ctrl-C stops it)", err=True)
    sys.stderr.flush()
    uvicorn.run(browse.guarded(ds.app(), token, browse.allowed_hosts(port)), host=browse.HOST, port=port,
                log_level="warning", lifespan="on", workers=1)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # ValueError: blocked (None in sys.modules)
        return False
