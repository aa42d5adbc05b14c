"""How `git hive run` shows a run: one live status line on a terminal, a summary at the end."""

from __future__ import annotations

import shutil
from typing import Callable, TextIO

import click

from hive import cost
from hive.cli.output import one_line
from hive.orchestrator.progress import RunProgress, RunSummary

_CLEAR = "\r\x1b[K"


class LiveLine:
    """The daemon's event lines scroll above one status line that is redrawn in place (only
    ever used when stdout is a terminal)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.text = ""

    def log(self, line: str) -> None:
        self.stream.write(f"{_CLEAR}{line}\n")
        self._draw()

    def progress(self, progress: RunProgress) -> None:
        self.text = progress_text(progress)
        self.stream.write(_CLEAR)
        self._draw()

    def close(self) -> None:
        if self.text:
            self.stream.write(_CLEAR)
            self.stream.flush()
        self.text = ""

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        # one screen line at most: a wrapped line could not be cleared by `\r`
        self.stream.write(self.text[: max(1, width - 1)])
        self.stream.flush()


def progress_text(progress: RunProgress) -> str:
    return (f"{progress.finalized} of {progress.total} finalized · {progress.busy} agent(s) busy · "
            f"{progress.usage.total_tokens:,} tokens · ${progress.usage.cost_usd:.4f}")


def summary_lines(summary: RunSummary, title_of: Callable[[str], str]) -> list[str]:
    """The summary printed when a run ends: counts, the failed and escalated issues with their
    reasons, the spend and the wall time."""
    lines = [f"run summary: {len(summary.finalized)} finalized · {len(summary.failed)} failed · "
             f"{len(summary.escalated)} escalated · {_duration(summary.wall_seconds)}",
             f"  spent: {summary.usage.total_tokens:,} tokens ({cost.describe(summary.usage)})"]
    for how, issues in (("failed", summary.failed), ("escalated", summary.escalated)):
        for issue_id, reason in issues.items():
            lines.append(one_line(f"  {how} {issue_id} {title_of(issue_id)}: {reason or 'no reason recorded'}"))
    return lines


def print_summary(summary: RunSummary, title_of: Callable[[str], str]) -> None:
    for line in summary_lines(summary, title_of):
        click.echo(line)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"
