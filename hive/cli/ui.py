"""git hive ui"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import click

from hive.cli.params import Whole

from hive.errors import HiveError

INSTALL_HINT = "Datasette is not installed (git hive ui needs it): pip install 'git-hive[ui]'"


@click.command()
@click.option("--port", type=Whole(1, 65535), default=8001, show_default=True,
              help="Serve on 127.0.0.1 at this port.")
def ui(port: int) -> None:
    """Browse the queue, costs, escalations and merges in Datasette (127.0.0.1 only; Ctrl-C ends it)."""
    if not _installed("datasette"):
        raise HiveError(INSTALL_HINT)
    from hive import browse
    from hive.project import Project
    from hive.runtime import Runtime

    project = Project.open()
    index_db, runtime_db = browse.databases(project)
    runtime = Runtime(project.paths)
    runtime.agents()   # opening it migrates it: a repository no daemon ran in yet has its tables too
    runtime.close()
    folder = project.paths.hive_dir / "ui"
    history_db = browse.snapshot(project, folder)
    metadata_file = folder / "metadata.json"
    metadata_file.write_text(json.dumps(browse.metadata(), indent=1), encoding="utf-8")
    click.echo(f"git hive ui: http://{browse.HOST}:{port}/ (Ctrl-C stops it)", err=True)
    args = browse.serve_arguments(index_db, runtime_db, history_db, metadata_file, port)
    project.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Datasette becomes this process: Ctrl-C, `kill` and the exit code are its own, and no
    # server outlives a `git hive ui` that was ended
    os.execv(sys.executable, [sys.executable, "-m", "datasette", *args])


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):   # ValueError: blocked (None in sys.modules)
        return False
