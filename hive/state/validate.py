"""Checks that span issues: references must exist, the dependency graph must stay acyclic."""

from __future__ import annotations

from typing import Callable, Iterable

from hive.errors import BadInput


def find_cycle(starts: Iterable[str], blockers_of: Callable[[str], Iterable[str]]) -> list[str] | None:
    """A dependency cycle reachable from `starts`, as [a, b, ..., a], or None. Iterative DFS."""
    done: set[str] = set()
    for start in sorted(starts):
        if start in done:
            continue
        on_path: dict[str, int] = {}
        path: list[str] = []
        stack: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(blockers_of(start))))]
        on_path[start] = 0
        path.append(start)
        while stack:
            node, children = stack[-1]
            advanced = False
            for child in children:
                if child in on_path:
                    return path[on_path[child]:] + [child]
                if child not in done:
                    on_path[child] = len(path)
                    path.append(child)
                    stack.append((child, iter(sorted(blockers_of(child)))))
                    advanced = True
                    break
            if not advanced:
                stack.pop()
                path.pop()
                del on_path[node]
                done.add(node)
    return None


def check_references(issue_id: str, depends_on: Iterable[str], parent: str,
                     exists: Callable[[str], bool], where: str | None = None) -> None:
    for blocker in depends_on:
        if blocker == issue_id:
            raise BadInput(f"{issue_id} cannot depend on itself", where)
        if not exists(blocker):
            raise BadInput(f"unknown issue {blocker} (in depends_on of {issue_id})", where)
    if parent:
        if parent == issue_id:
            raise BadInput(f"{issue_id} cannot be its own parent", where)
        if not exists(parent):
            raise BadInput(f"unknown issue {parent} (parent of {issue_id})", where)


def check_acyclic(issue_id: str, depends_on: Iterable[str],
                  blockers_of: Callable[[str], Iterable[str]], where: str | None = None) -> None:
    """Refuse giving `issue_id` these blockers if that closes a cycle; name the cycle."""
    proposed = list(depends_on)

    def edges(node: str) -> Iterable[str]:
        return proposed if node == issue_id else blockers_of(node)

    cycle = find_cycle([issue_id], edges)
    if cycle:
        raise BadInput("dependency cycle: " + " -> ".join(cycle), where)
