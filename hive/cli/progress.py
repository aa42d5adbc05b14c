"""How `git hive run` shows a run: one live status line on a terminal, a summary at the end."""

from __future__ import annotations

import shutil
import sys
from typing import Callable, TextIO

import click

from hive.api import describe_usage
from hive.api.run import RunProgress, RunSummary
from hive.cli.output import one_line

_CLEAR = "\r\x1b[K"


class LiveLine:
    """The daemon's event lines scroll above one status line that is redrawn in place (only
    ever used when stdout is a terminal). With `errors` (the stderr the same terminal shows),
    whatever is written to `sys.stderr` meanwhile — a warning of any part of hive — is put above
    the line too, instead of running into it; `close` gives `sys.stderr` back."""

    def __init__(self, stream: TextIO, errors: TextIO | None = None):
        self.stream = stream
        self.text = ""
        self._cleared = False
        self._errors = errors
        if errors is not None:
            sys.stderr = _Above(self, errors)

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
        if self._errors is not None and isinstance(sys.stderr, _Above):
            sys.stderr = self._errors
        self._errors = None

    def above(self, write: Callable[[], None], ended_line: bool) -> None:
        """Run `write` (output of its own) with the status line out of the way, then draw it again
        once the output ended its line."""
        if self.text and not self._cleared:
            self.stream.write(_CLEAR)
            self.stream.flush()
        write()
        self._cleared = not ended_line          # in the middle of their line: leave it be
        if ended_line:
            self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        # one screen line at most: a wrapped line could not be cleared by `\r`
        self.stream.write(self.text[: max(1, width - 1)])
        self.stream.flush()


class _Above:
    """`sys.stderr` while a live line is drawn: each write goes above the line."""

    def __init__(self, live: LiveLine, errors: TextIO):
        self._live, self._errors = live, errors

    def write(self, text: str) -> int:
        def write() -> None:
            self._errors.write(text)
            self._errors.flush()
        self._live.above(write, text.endswith("\n"))
        return len(text)

    def flush(self) -> None:
        self._errors.flush()

    def __getattr__(self, name: str):
        return getattr(self._errors, name)


def progress_text(progress: RunProgress) -> str:
    return (f"{progress.finalized} of {progress.total} finalized · {progress.busy} agent(s) busy · "
            f"{progress.usage.total_tokens:,} tokens · ${progress.usage.cost_usd:.4f}")


def summary_lines(summary: RunSummary, title_of: Callable[[str], str]) -> list[str]:
    """The summary printed when a run ends: counts, the failed and escalated issues with their
    reasons, the spend and the wall time."""
    lines = [f"run summary: {len(summary.finalized)} finalized · {len(summary.failed)} failed · "
             f"{len(summary.escalated)} escalated · {_duration(summary.wall_seconds)}",
             f"  spent: {summary.usage.total_tokens:,} tokens ({describe_usage(summary.usage)})"]
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
