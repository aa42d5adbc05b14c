"""docs/API.md, run: every python block of the page, in order, in one namespace, in a fresh
repository (`repo`), so the documented API cannot drift from what it does."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "API.md"


def test_the_api_page_runs_as_written(repo: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"repo": repo}
    for n, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/API.md block {n}", "exec"), namespace)   # noqa: S102 - our own docs


def test_api_errors_are_the_commands_one_liners(repo: Path) -> None:
    import pytest

    from hive.api import Hive
    from hive.errors import BadInput, HiveError

    with Hive.open(repo) as hive:
        with pytest.raises(BadInput, match="the title is empty"):
            hive.create("  ")
        with pytest.raises(HiveError, match="hv-zzzzzz"):
            hive.issue("hv-zzzzzz")
        done = hive.create("Finished")
        hive.update(done.id, status="finalized", force=True)
        with pytest.raises(HiveError, match="finalized: no agent will work it again"):
            hive.tell(done.id, "too late")
        with pytest.raises(BadInput, match="nothing to change"):
            hive.update(done.id)
