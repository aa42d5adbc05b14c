"""The shape of `hive/`, checked by parsing its source with `ast` (nothing is imported):

- no import circle between modules, nor between hive's top-level packages and modules
  (`hive.cli`, `hive.demo`, `hive.state`, ...), counting imports inside functions and under
  `TYPE_CHECKING` — they are dependencies all the same;
- at most MAX_LAZY_IMPORTS imports of hive modules inside functions outside `hive/cli/` (the CLI
  loads each command lazily; elsewhere a hidden import hides the real dependency graph);
- no function longer than MAX_FUNCTION_LINES lines.

The layers themselves (which package may import which) are the import-linter contract in
pyproject.toml, run by `.ci/run` as `lint-imports`.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

HIVE = Path(__file__).resolve().parents[1] / "hive"
MAX_LAZY_IMPORTS = 10
MAX_FUNCTION_LINES = 80


@dataclass(frozen=True)
class Import:
    source: str      # the importing module, e.g. hive.merge.pipeline
    target: str      # the imported hive module, e.g. hive.state.store
    line: int
    in_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(HIVE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(path): path for path in sorted(HIVE.rglob("*.py"))}


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _resolve(name: str) -> str | None:
    """The hive module `name` (a module, or an attribute of one) lives in; None outside hive."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if _is_package(module) else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        # `from hive.state import issues` imports the module hive.state.issues
        names = [f"{base}.{alias.name}" for alias in node.names]
    return sorted({target for target in map(_resolve, names) if target is not None})


class _ImportCollector(ast.NodeVisitor):
    def __init__(self, module: str):
        self.module = module
        self.depth = 0               # functions we are inside of
        self.imports: list[Import] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        for target in _targets(node, self.module):
            if target != self.module:
                self.imports.append(Import(self.module, target, node.lineno, self.depth > 0))

    visit_Import = visit_ImportFrom = _import


def _all_imports() -> list[Import]:
    imports: list[Import] = []
    for module, path in MODULES.items():
        collector = _ImportCollector(module)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        imports += collector.imports
    return imports


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def _describe(cycle: list[str], imports: list[Import], unit=lambda module: module) -> str:
    members = set(cycle)
    arrows = sorted({f"{i.source}:{i.line} -> {i.target}" for i in imports
                     if unit(i.source) in members and unit(i.target) in members
                     and unit(i.source) != unit(i.target)})
    return " <-> ".join(cycle) + "\n    " + "\n    ".join(arrows)


def _top_level(module: str) -> str:
    """hive.state.store -> hive.state; hive.demo -> hive.demo; hive -> hive."""
    return ".".join(module.split(".")[:2])


def test_no_import_circle_between_modules() -> None:
    imports = _all_imports()
    edges: dict[str, set[str]] = {}
    for i in imports:
        edges.setdefault(i.source, set()).add(i.target)
    cycles = _cycles(edges)
    assert not cycles, "import circles between modules:\n" + "\n".join(_describe(c, imports) for c in cycles)


def test_no_import_circle_between_packages() -> None:
    imports = _all_imports()
    edges: dict[str, set[str]] = {}
    for i in imports:
        source, target = _top_level(i.source), _top_level(i.target)
        if source != target and "hive" not in (source, target):
            edges.setdefault(source, set()).add(target)
    cycles = _cycles(edges)
    assert not cycles, "import circles between packages:\n" + "\n".join(
        _describe(c, imports, _top_level) for c in cycles)


def test_few_imports_inside_functions_outside_the_cli() -> None:
    lazy = [i for i in _all_imports() if i.in_function and not i.source.startswith("hive.cli")]
    statements = sorted({(i.source, i.line) for i in lazy})
    listing = "\n".join(f"    {MODULES[source].relative_to(HIVE.parent)}:{line}" for source, line in statements)
    assert len(statements) <= MAX_LAZY_IMPORTS, (
        f"{len(statements)} imports of hive modules inside functions outside hive/cli/ "
        f"(at most {MAX_LAZY_IMPORTS}):\n{listing}")


def test_no_function_over_80_lines() -> None:
    long_ones = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_ones.append(f"    {path.relative_to(HIVE.parent)}:{node.lineno} {node.name}: {length} lines")
    assert not long_ones, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long_ones)


def test_the_checks_see_what_they_check() -> None:
    """The parser finds the imports it is meant to count (a guard against a check that passes by
    seeing nothing)."""
    imports = _all_imports()
    assert "hive.cli" in MODULES and "hive.state.store" in MODULES
    assert any(i.source == "hive.cli" and i.target == "hive.errors" for i in imports)
    assert _targets(ast.parse("from hive.state import layout").body[0], "hive.queen") == ["hive.state.layout"]
    assert _targets(ast.parse("from . import layout").body[0], "hive.state.store") == ["hive.state.layout"]
    assert _targets(ast.parse("import hive.git as g").body[0], "hive.demo") == ["hive.git"]
    assert _cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]


def _pyproject() -> dict:
    return tomllib.loads((HIVE.parent / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_package_ships_in_a_wheel() -> None:
    """A package missing from `[tool.setuptools] packages` works in an editable install and is
    absent from a wheel."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    packages = {_module_name(path.parent / "__init__.py") for path in HIVE.rglob("__init__.py")}
    assert packages <= listed, f"not in pyproject's packages: {sorted(packages - listed)}"


def test_the_layers_contract_names_every_top_level_module() -> None:
    """import-linter checks only the layers it is told of: a new top-level module or package
    must be given its layer."""
    contract = _pyproject()["tool"]["importlinter"]["contracts"][0]
    named = {name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}
    top_level = {path.stem if path.is_file() else path.name
                 for path in HIVE.iterdir()
                 if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    assert top_level <= named, f"no layer in pyproject's import-linter contract: {sorted(top_level - named)}"


# -- "Where a rule lives" (docs/ARCHITECTURE.md), checked where a parser can see it ----------------

def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))) if isinstance(n, ast.Call)]


def _dotted(node: ast.expr) -> str:
    """`a.b.c` of a Name/Attribute chain ("" for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _where(module: str, node: ast.AST) -> str:
    return f"{MODULES[module].relative_to(HIVE.parent)}:{getattr(node, 'lineno', 0)}"


def _status_writes(tree: ast.AST) -> list[ast.Call]:
    """Calls of `issues.update(project, id, {"status": ...})` in `tree`."""
    found = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _dotted(call.func)
        if name.endswith("issues.update") and len(call.args) > 2 and isinstance(call.args[2], ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "status" for k in call.args[2].keys):
            found.append(call)
    return found


def test_an_issue_changes_status_only_in_lifecycle() -> None:
    elsewhere = [_where(m, c) for m, p in MODULES.items() if m != "hive.lifecycle"
                 for c in _status_writes(ast.parse(p.read_text(encoding="utf-8")))]
    assert not elsewhere, "status written outside hive/lifecycle.py:\n    " + "\n    ".join(elsewhere)
    probe = ast.parse('issues.update(p, i, {"status": "open"})\nissues.update(p, i, {"title": "x"})')
    assert len(_status_writes(probe)) == 1
    assert _status_writes(ast.parse((HIVE / "lifecycle.py").read_text(encoding="utf-8")))


def _spending(tree: ast.AST) -> list[ast.AST]:
    """Assignments to a budget's `retries`/`switches`, and `.spend(...)` calls, in `tree`."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(t, ast.Attribute) and t.attr in ("retries", "switches") for t in flat):
            found.append(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "spend" \
                and _dotted(node.func) != "lifecycle.spend":
            found.append(node)
    return found


def test_a_budget_is_spent_only_in_lifecycle() -> None:
    """Spending (usage added, a retry or an agent switch taken) happens in `hive/lifecycle.py`;
    `hive/runtime/budgets.py` defines the record."""
    allowed = {"hive.lifecycle", "hive.runtime.budgets"}
    found = [(m, n) for m, p in MODULES.items() for n in _spending(ast.parse(p.read_text(encoding="utf-8")))]
    elsewhere = [_where(m, n) for m, n in found if m not in allowed]
    assert not elsewhere, "a budget spent outside hive/lifecycle.py:\n    " + "\n    ".join(elsewhere)
    assert "hive.lifecycle" in {m for m, _ in found}, "the check sees no spending where there is some"


def test_agent_processes_start_only_in_agent_process() -> None:
    """Every backend starts its agent through `AgentProcess.start` (jail, process group, pipes);
    the scripted agent is itself an agent (its `run:` steps are the agent's commands)."""
    allowed = {"hive.backends.agent_process", "hive.backends.scripted_agent"}
    starts = ("subprocess.Popen", "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "os.fork")
    elsewhere = [_where(m, c) for m, p in MODULES.items() if m.startswith(("hive.backends", "hive.agents"))
                 and m not in allowed for c in _calls(p) if _dotted(c.func) in starts]
    assert not elsewhere, "a process started outside AgentProcess:\n    " + "\n    ".join(elsewhere)
    nowhere = [_where(m, c) for m, p in MODULES.items() for c in _calls(p)
               if _dotted(c.func).startswith("asyncio.create_subprocess")]
    assert not nowhere, "asyncio subprocesses (hive starts processes with Popen and pidfds):\n    " + "\n    ".join(nowhere)


def test_work_lands_only_through_the_lander() -> None:
    """The pipeline, its rescan after a restart and `git hive finalize` land through
    `hive.merge.lander.Lander`, which decides the test gate (the agent's own command, then the
    project's) and the jail once: a path calling `mechanical.land` (or `land_train`) itself could
    skip either."""
    calls = [(m, c) for m, p in MODULES.items() for c in _calls(p)
             if _dotted(c.func).endswith(("mechanical.land", "mechanical.land_train"))]
    elsewhere = [_where(m, c) for m, c in calls if m != "hive.merge.lander"]
    assert not elsewhere, "a landing outside the Lander:\n    " + "\n    ".join(elsewhere)
    assert {_dotted(c.func) for _, c in calls} == {"mechanical.land", "mechanical.land_train"}, \
        "the check sees no landing where there is one"


def test_only_the_agent_session_subscribes_to_a_session() -> None:
    """A worker, the refinery and the Queen hear their agent's events through
    `hive.agents.session.AgentSession`, the one caller of `Backend.on_session` outside the
    backends: a second subscriber would take a session's events from it."""
    calls = [(m, c) for m, p in MODULES.items() for c in _calls(p)
             if isinstance(c.func, ast.Attribute) and c.func.attr == "on_session"]
    elsewhere = [_where(m, c) for m, c in calls
                 if m != "hive.agents.session" and not m.startswith("hive.backends.")]
    assert not elsewhere, "a session subscribed outside AgentSession:\n    " + "\n    ".join(elsewhere)
    assert any(m == "hive.agents.session" for m, _ in calls), "the check sees no subscription where there is one"


def test_only_rewrite_resets_a_worktree_an_agent_wrote() -> None:
    """libgit2's reset and checkout are called only by `rewrite` (after it removed the links and
    special files an agent left: libgit2 would write through the one, wait on the other),
    `fastforward` (a person's checkout of the target, only files the person has not changed) and
    `worktrees` (a folder it has just made, empty). `rewrite.reset` itself only by `worktrees`
    (it keeps the heads first) and `spares` (a worktree `worktrees` handed over after keeping its
    heads); the Queen's plan directory, whose session may still write there, only has its HEAD
    and index moved onto the commit just made of its files (`rewrite.move_head`)."""
    calls = [(m, c) for m, p in MODULES.items() for c in _calls(p) if isinstance(c.func, ast.Attribute)]
    raw = [(m, c) for m, c in calls if c.func.attr == "checkout_tree" or (
           c.func.attr == "reset" and any(mode in ast.unparse(a) for a in c.args
                                          for mode in ("GIT_RESET", "ResetMode")))]
    allowed = {"hive.workspace.rewrite", "hive.workspace.fastforward", "hive.workspace.worktrees"}
    elsewhere = [_where(m, c) for m, c in raw if m not in allowed]
    assert not elsewhere, "a worktree reset outside hive/workspace/rewrite.py:\n    " + "\n    ".join(elsewhere)
    assert {m for m, _ in raw} == allowed, "the check sees no reset where there are some"
    through = {m for m, c in calls if c.func.attr == "reset" and ast.unparse(c.func.value) == "rewrite"}
    assert through == {"hive.workspace.worktrees", "hive.workspace.spares"}


def test_the_api_only_contract_forbids_every_module_but_the_api() -> None:
    """A new top-level module must be forbidden to the API-only commands too, or they could
    reach past the API through it."""
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    [api_only] = [c for c in contracts if c["type"] == "forbidden" and "hive.cli.status" in c["source_modules"]]
    top_level = {path.stem if path.is_file() else path.name
                 for path in HIVE.iterdir()
                 if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    forbidden = {name.removeprefix("hive.") for name in api_only["forbidden_modules"]}
    assert forbidden == top_level - {"__main__", "cli", "api", "errors"}, sorted(forbidden ^ (top_level - {"__main__", "cli", "api", "errors"}))
