"""How much work waits behind each issue: what orders equal priorities in the ready queue.

Among issues of the same priority the ready queue (`index.READY_SQL`) takes first the one with
the longest chain of work behind it, then the one with the most work behind it, then the oldest.
Starting the head of a long chain first is what keeps the agents busy to the end: with 3 agents,
12 independent issues and 2 chains of 6, taking issues in creation order leaves two agents idle
while the chains finish (10 rounds); taking the chain heads first needs 8, the best there is.

An issue "waits" while its status is not one that satisfies its dependents (done, finalized,
canceled); an epic waits but is no work of an agent's (it weighs 0). For each issue, over the
waiting issues that depend on it directly or through others:

    chain       the most work on one path of dependents (a chain of 5 issues behind it: 5)
    dependents  the work of all of them, each counted once

Computed for the whole graph at once in linear time plus one bitset union per edge (`compute`);
the index stores them beside each issue and recomputes them only when the graph of waiting issues
changed (an issue added, removed, finished or reopened, or its blockers edited), so a claim or
a title edit costs nothing here, and then only in front of what changed (`Index.refresh_ranks`):
a new issue with nothing behind it costs one row, not the whole queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Rank:
    chain: int
    dependents: int


NONE = Rank(0, 0)


def compute(weights: Mapping[str, int], edges: Iterable[tuple[str, str]]) -> dict[str, Rank]:
    """`weights`: each waiting issue's work (1, an epic 0); `edges`: (issue, blocker) pairs.
    Edges from or to issues not in `weights` are ignored; a cycle (reported by the index, never
    adopted by hive's own writes) is cut where the walk meets it, so this always ends. The walk
    goes in id order, so where it cuts a cycle does not depend on the order rows come in."""
    dependents_of: dict[str, list[str]] = {}
    for issue, blocker in edges:
        if issue in weights and blocker in weights and issue != blocker:
            dependents_of.setdefault(blocker, []).append(issue)
    # How many blockers will still read an issue's bitset: once none, only its count is kept.
    # (A bitset per issue, kept to the end, was quadratic in memory: 1 GB at 120k waiting issues.)
    readers: dict[str, int] = {}
    for dependents in dependents_of.values():
        dependents.sort()
        for dependent in dependents:
            readers[dependent] = readers.get(dependent, 0) + 1
    # A bit for each issue that waits behind another (only those are ever in a set); an issue
    # with no edge at all is left out of every table below and ranks NONE (most of a queue taken
    # in whole: ~15 MB less at the peak of taking in 65k of them)
    position = {issue: n for n, issue in enumerate(readers)}
    working = 0   # the bits of issues that are work (weight > 0), to count a set's work at once
    for issue, n in position.items():
        if weights[issue]:
            working |= 1 << n
    chain: dict[str, int] = {}
    behind: dict[str, int] = {}        # the bitset of everything waiting behind an issue, while read
    counted: dict[str, int] = {}
    for start in sorted(weights):
        if start in chain or (start not in dependents_of and start not in readers):
            continue
        # iterative post-order: an issue is finished once all its dependents are
        stack = [(start, iter(dependents_of.get(start, ())))]
        on_path = {start}
        while stack:
            issue, pending = stack[-1]
            child = next(pending, None)
            if child is not None:
                if child not in chain and child not in on_path:
                    on_path.add(child)
                    stack.append((child, iter(dependents_of.get(child, ()))))
                continue
            stack.pop()
            on_path.discard(issue)
            longest, union = 0, 0
            for dependent in dependents_of.get(issue, ()):
                if dependent in chain:   # not, only where a cycle was cut
                    longest = max(longest, weights[dependent] + chain[dependent])
                    union |= (1 << position[dependent]) | behind[dependent]
                readers[dependent] -= 1
                if not readers[dependent] and dependent in behind:
                    del behind[dependent]
            chain[issue] = longest
            counted[issue] = (union & working).bit_count()
            if readers.get(issue):
                behind[issue] = union
    return {issue: Rank(chain[issue], counted[issue]) if chain.get(issue) or counted.get(issue) else NONE
            for issue in weights}
