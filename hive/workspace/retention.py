"""What hive keeps after the work is done, and for how long: kept attempts (`attempts`) and
session transcripts (`hive.backends.transcripts`), both removed only here — by `git hive prune`
and, for transcripts, at each run's start.

A transcript goes once older than `transcript_retention_days` (its file's last write), or when the
transcripts together pass `transcript_max_mb` (the oldest first). The transcripts of issues an
agent may still be working (`busy`) are never touched: a session may be writing them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection

import pygit2

from hive.backends.transcripts import FOLDER
from hive.workspace import attempts
from hive.workspace.attempts import DAY

MB = 1024 * 1024


@dataclass
class Pruned:
    attempts: list[attempts.Attempt] = field(default_factory=list)
    transcripts: list[Path] = field(default_factory=list)


def prune_transcripts(hive_dir: Path, older_than_days: float, max_bytes: int, busy: Collection[str] = (),
                      now: float | None = None) -> list[Path]:
    """Remove the transcripts past their retention or beyond the size cap; the files removed."""
    cutoff = (time.time() if now is None else now) - older_than_days * DAY
    root = Path(hive_dir) / FOLDER
    files: list[tuple[float, int, Path]] = []
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            total += stat.st_size
            if path.suffix == ".jsonl" and path.parent.name not in busy:
                files.append((stat.st_mtime, stat.st_size, path))
    removed: list[Path] = []
    for modified, size, path in sorted(files):
        if modified >= cutoff and total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed.append(path)
    for parent in {p.parent for p in removed}:
        _remove_empty(parent, root)
    return removed


def _remove_empty(folder: Path, root: Path) -> None:
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def prune(repo: pygit2.Repository, hive_dir: Path, attempt_days: float, transcript_days: float,
          transcript_max_bytes: int, busy: Collection[str] = (), now: float | None = None) -> Pruned:
    """`git hive prune`: kept attempts and transcripts past their retention."""
    return Pruned(attempts.prune(repo, attempt_days, now),
                  prune_transcripts(hive_dir, transcript_days, transcript_max_bytes, busy, now))
