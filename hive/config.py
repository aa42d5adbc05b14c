"""git-hive's configuration: four layers, later ones win (DESIGN §6, §7).

1. defaults (the `Config` field defaults below);
2. global: `$HIVE_GLOBAL_CONFIG`, else `$XDG_CONFIG_HOME/hive/config.toml`, else
   `~/.config/hive/config.toml`;
3. project: `.hive.toml` *on the target branch* (trusted, because it is code there): the main
   worktree's file when the main worktree has the target branch checked out, otherwise the blob in
   the tip commit of `refs/heads/<target_branch>`. Never a linked (worker) worktree's copy;
4. environment: `HIVE_<UPPER_KEY>`, parsed per the key's type.

Precedence is per key; the `[codex]` table is one key, so a later layer's table replaces an
earlier one as a whole (it is passed verbatim to codex, never merged).

Reading uses `tomllib` (fast); `set_value`/`unset_value` edit with `tomlkit` so that comments and
layout survive. Every problem a person can fix is a `BadInput` naming `file:line` or the env var.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tempfile
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from hive import lines
from hive.backends import registry
from hive.jail import mechanisms as jail_mechanisms
from hive.errors import BadInput
from hive.git import branch_ref, fetch_objects, open_repository, read_ref, run

if TYPE_CHECKING:
    import pygit2

    from hive.git import RepoPaths

PROJECT_FILE = ".hive.toml"
GLOBAL_ENV = "HIVE_GLOBAL_CONFIG"
ENV_PREFIX = "HIVE_"
BACKENDS = registry.names()
ROLES = ("worker", "refinery", "queen")

_ID_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,15}\Z")   # keeps ids within hive.state.issue_file.ID_RE
_SUBKEY_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")


def _key(default: Any, doc: str, *, choices: tuple[str, ...] = (), minimum: int = 0,
         nonempty: bool = False) -> Any:
    return field(default=default, metadata={
        "doc": doc, "choices": choices, "minimum": minimum, "nonempty": nonempty})


@dataclass(frozen=True)
class Config:
    """The effective configuration: one typed attribute per key. `Config()` is all defaults."""

    max_agents: int = _key(3, "How many workers run at once.", minimum=1)
    backend: str = _key("claude", "Agent backend for every role without an override.", choices=BACKENDS)
    worker_model: str = _key("claude-sonnet-4-6", "Model of the workers.", nonempty=True)
    refinery_model: str = _key("claude-opus-4-6", "Model of the refinery session.", nonempty=True)
    queen_model: str = _key("claude-opus-4-6", "Model of the queen (planning) session.", nonempty=True)
    max_tokens_per_issue: int = _key(
        200_000, "Token budget of one issue (uncached input + cache writes + output; cache reads are "
                 "not counted here); going over is a failure.")
    max_tokens_per_run: int = _key(0, "Token budget of one `git hive run`, counted the same way; 0 = no cap.")
    max_cost_usd_per_issue: float = _key(
        10.0, "USD budget of one issue, cache reads included; going over is a failure; 0 = no cap.")
    max_cost_usd_per_run: float = _key(
        100.0, "USD budget of one `git hive run`, cache reads included; then no new agents; 0 = no cap.")
    max_retries: int = _key(2, "Retries with the same agent before switching agents.")
    max_agent_switches: int = _key(2, "Fresh agents in a clean worktree before escalating.")
    anomaly_failure_threshold: int = _key(
        3, "This many failures within anomaly_window_minutes escalate at once.", minimum=1)
    anomaly_window_minutes: int = _key(10, "Window of the anomaly detector, in minutes.", minimum=1)
    test_command: str = _key("", "Shell command that tests a merge candidate; empty = no tests.")
    test_timeout_seconds: int = _key(600, "Time limit of one test_command run, in seconds.", minimum=1)
    target_branch: str = _key("main", "Branch that finished work is merged into.", nonempty=True)
    merge_mode: str = _key("auto", "auto: merge when green; manual: wait for `git hive review`.",
                           choices=("auto", "manual"))
    sandbox: str = _key("on", "on: agents run in an OS jail (the first mechanism that works here); a mechanism's "
                              f"name ({', '.join(jail_mechanisms.names())}): that one or none; off: unjailed, "
                              "warned at every start.", choices=jail_mechanisms.choices())
    touches_mode: str = _key(
        "wait", "wait: an issue whose declared touches meet a busy issue's files waits for its landing; "
                "advise: where only declared globs meet, it starts when nothing else is ready.",
        choices=("wait", "advise"))
    notes_prompt_tokens: int = _key(
        2_000, "Tokens of notes a worker's prompt may carry (estimated: UTF-8 bytes / 3.5), the most relevant "
               "first; 0 = no notes (docs/PERFORMANCE.md says how the default was chosen).")
    id_prefix: str = _key("hv", "Prefix of new issue ids (<prefix>-<6 chars>).", nonempty=True)
    lease_seconds: int = _key(900, "How long a claim lives without a heartbeat.", minimum=1)
    stall_seconds: int = _key(300, "No agent activity for this long is a stall.", minimum=1)
    attempt_retention_days: int = _key(
        30, "Kept attempts (refs/hive/attempts/*) older than this many days go at `git hive prune`.")
    transcript_retention_days: int = _key(
        30, "Session transcripts older than this many days go (at `git hive prune` and each run's start).")
    transcript_max_mb: int = _key(
        500, "Total size of the session transcripts kept, in MB: past it the oldest go first.", minimum=1)
    claude_command: str = _key("claude", "The claude CLI: a path or a name on PATH.", nonempty=True)
    codex_command: str = _key("codex", "The codex CLI: a path or a name on PATH.", nonempty=True)
    acp_command: str = _key("claude-agent-acp", "The ACP agent (backend acp): a command line, its program a path "
                                                "or a name on PATH.", nonempty=True)
    acp_endpoints: str = _key("", "URLs the jailed ACP agent may reach, space-separated; empty = ANTHROPIC_BASE_URL "
                                  "/ OPENAI_BASE_URL when set, else Anthropic's and OpenAI's APIs.")
    acp_env: str = _key("ANTHROPIC_* CLAUDE_* OPENAI_* CODEX_*", "Environment names (X_* a prefix) the jailed ACP "
                                                                 "agent gets, space-separated.")
    acp_mode: str = _key("", "The ACP session mode hive sets; empty = the first of default, read-only, ask, "
                             "manual the agent offers.")
    queen_backend: str = _key("", "Backend of the queen; empty = backend.", choices=("",) + BACKENDS)
    worker_backend: str = _key("", "Backend of the workers; empty = backend.", choices=("",) + BACKENDS)
    refinery_backend: str = _key("", "Backend of the refinery; empty = backend.",
                                 choices=("",) + BACKENDS)
    sync_remote: str = _key("", "Remote that `git hive sync` uses; empty = the usual default.")
    scripted_script: str = _key("", "Path of the scripted backend's script file.")
    codex: dict = field(default_factory=dict, hash=False, metadata={
        "doc": "Table written verbatim into the config.toml of hive's private CODEX_HOME.",
        "choices": (), "minimum": 0, "nonempty": False})

    def __post_init__(self) -> None:
        for f in fields(self):
            problem = _problem(f.name, getattr(self, f.name))
            if problem:
                raise BadInput(problem)

    def backend_for(self, role: str) -> str:
        """The backend of `role` (worker|refinery|queen): its override, else `backend`."""
        _check_role(role)
        return getattr(self, role + "_backend") or self.backend

    def model_for(self, role: str) -> str:
        """The model of `role` (worker|refinery|queen)."""
        _check_role(role)
        return getattr(self, role + "_model")

    def as_dict(self) -> dict[str, Any]:
        """Key -> effective value, in declaration order (a deep copy: safe to mutate)."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


@dataclass(frozen=True)
class Key:
    """The declaration of one configuration key."""

    name: str
    type: type                      # int, str or dict
    default: Any
    choices: tuple[str, ...]        # allowed values; empty = any
    minimum: int                    # for ints
    nonempty: bool                  # for strings
    doc: str

    @property
    def env(self) -> str:
        """Name of the environment variable that overrides this key."""
        return ENV_PREFIX + self.name.upper()


def _declare() -> dict[str, Key]:
    table = {}
    for f in fields(Config):
        default = f.default_factory() if f.default is MISSING else f.default
        table[f.name] = Key(f.name, type(default), default, f.metadata["choices"],
                            f.metadata["minimum"], f.metadata["nonempty"], f.metadata["doc"])
    return table


KEYS: dict[str, Key] = _declare()


# ---------------------------------------------------------------------------------------------
# Validation and parsing of single values

def valid_branch_name(name: str) -> bool:
    """True if `name` is safe as `refs/heads/<name>` (a subset of `git check-ref-format`)."""
    if not name or name == "@" or name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")):
        return False
    if ".." in name or "//" in name or "@{" in name:
        return False
    if any(ch in " ~^:?*[\\" or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))


def _problem(name: str, value: Any) -> str | None:
    """Why `value` is not acceptable for key `name`, or None if it is."""
    key = KEYS[name]
    expected = key.type
    if expected is int:
        if type(value) is not int:
            return f"{name} must be an integer, not {_describe(value)}"
        if value < key.minimum:
            return f"{name} must be at least {key.minimum}, not {value}"
        return None
    if expected is float:
        if type(value) not in (int, float) or not 0 <= value < float("inf"):
            return f"{name} must be a number of at least 0, not {_describe(value)}"
        return None
    if expected is dict:
        return None if isinstance(value, dict) else f"{name} must be a table, not {_describe(value)}"
    if type(value) is not str:
        return f"{name} must be a string, not {_describe(value)}"
    if key.choices and value not in key.choices:
        allowed = "|".join(repr(c) if c == "" else c for c in key.choices)
        return f"{name} must be one of {allowed}, not {value!r}"
    if key.nonempty and not value:
        return f"{name} must not be empty"
    if name == "target_branch":
        if not valid_branch_name(value):
            return f"target_branch {value!r} is not a valid branch name"
        if value == "hive" or value.startswith("hive/"):
            return f"target_branch {value!r} is one of hive's own branches"
    if name == "id_prefix" and not _ID_PREFIX_RE.match(value):
        return f"id_prefix {value!r} must be a lowercase letter then up to 15 lowercase letters or digits"
    return None


def _describe(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (dict, list)) else kind


def _unknown(name: str) -> str:
    import difflib  # only on this error path

    near = difflib.get_close_matches(name, KEYS, n=1)
    return f"unknown key {name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")


def parse_value(key: str, text: str) -> Any:
    """Turn the text of a command-line or env value into the typed value of `key`, validated.

    Ints are decimal; strings are taken as they are; `codex` (a table) takes a TOML inline table
    such as `{model = "o3"}`. Raises BadInput (without a location) when the value does not fit.
    """
    if key not in KEYS:
        raise BadInput(_unknown(key))
    kind = KEYS[key].type
    if kind is int:
        try:
            value: Any = int(text.strip(), 10)
        except ValueError:
            raise BadInput(f"{key} must be an integer, not {text!r}") from None
    elif kind is float:
        try:
            value = float(text.strip())
        except ValueError:
            raise BadInput(f"{key} must be a number, not {text!r}") from None
    elif kind is dict:
        try:
            value = tomllib.loads("v = " + text)["v"]
        except tomllib.TOMLDecodeError:
            raise BadInput(f"{key} must be a TOML inline table such as {{model = \"o3\"}}, not {text!r}") from None
    else:
        value = text
    problem = _problem(key, value)
    if problem:
        raise BadInput(problem)
    return value


# ---------------------------------------------------------------------------------------------
# Reading TOML text with locations for errors

MAX_CONFIG_CHARS = 1 << 20
MAX_TOML_DEPTH = 16   # tomllib recurses on each nested array and inline table

def _parse_toml(text: str, where: str) -> dict[str, Any]:
    if len(text) > MAX_CONFIG_CHARS:
        raise BadInput(f"a config file of more than {MAX_CONFIG_CHARS} characters", f"{where}:1")
    if text.count("[") + text.count("{") > MAX_TOML_DEPTH and lines.toml_depth(text) > MAX_TOML_DEPTH:
        raise BadInput(f"TOML nested deeper than {MAX_TOML_DEPTH}", f"{where}:1")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\s*\(at line (\d+), column \d+\)$", message)
        if match:
            line = int(match.group(1))
            message = message[:match.start()]
        else:
            line = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
            message = re.sub(r"\s*\(at end of document\)$", " (at end of file)", message)
        raise BadInput(f"invalid TOML: {message}", f"{where}:{line}") from None


def _line_of(text: str, key: str) -> int | None:
    """The line where top-level `key` is set (as `key = `, `key.x = ` or `[key]`), if found."""
    quoted = rf"(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
    assign = re.compile(rf"^\s*{quoted}\s*[=.]")
    header = re.compile(r"^\s*\[\[?\s*" + quoted + r"\s*[\].]")
    any_header = re.compile(r"^\s*\[")
    in_string: str | None = None
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        if in_string:
            if line.count(in_string) % 2:
                in_string = None
            continue
        if header.match(line):
            return number
        if any_header.match(line):
            in_table = True
        elif not in_table and assign.match(line):
            return number
        for delim in ('"""', "'''"):
            if line.count(delim) % 2:
                in_string = delim
                break
    return None


def _at(where: str, text: str, key: str) -> str:
    line = _line_of(text, key)
    return f"{where}:{line}" if line else where


def _validate_layer(data: dict[str, Any], text: str, where: str) -> dict[str, Any]:
    """Check every key of one parsed file; return its values. `where` names the file."""
    for name, value in data.items():
        if name not in KEYS:
            raise BadInput(_unknown(name), _at(where, text, name))
        problem = _problem(name, value)
        if problem:
            raise BadInput(problem, _at(where, text, name))
    return data


def _read_text(path: Path, *, project: bool = False) -> str | None:
    """A config file's text; None if there is none. A project file must not be a symlink
    (it would read a file from outside the target branch); a global one may be."""
    try:
        if project and path.is_symlink():
            raise BadInput(f"{PROJECT_FILE} is a symlink; git hive reads it only as a regular file",
                           str(path))
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(f"cannot read config file: {exc.strerror or exc}", str(path)) from None
    return _decode(data, str(path))


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BadInput("config file is not valid UTF-8", where) from None


# ---------------------------------------------------------------------------------------------
# Where the layers are

def global_path() -> Path:
    """The global config file: $HIVE_GLOBAL_CONFIG, else $XDG_CONFIG_HOME/hive/config.toml,
    else ~/.config/hive/config.toml (a relative XDG_CONFIG_HOME is ignored, as the spec says)."""
    override = os.environ.get(GLOBAL_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "hive" / "config.toml"


def project_path(repo: RepoPaths) -> Path:
    """The main worktree's `.hive.toml` (the file `git hive config set --project` edits)."""
    return repo.main_worktree / PROJECT_FILE


def _main_head_branch(repo: RepoPaths) -> str | None:
    """The branch the main worktree has checked out (None if detached or unreadable)."""
    try:
        head = (repo.common_dir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else None


_BLOB_CACHE: dict[tuple[str, str], str | None] = {}


def _read_branch_file(repo: RepoPaths, branch: str) -> str | None:
    """The text of `.hive.toml` in the tip commit of `refs/heads/<branch>`; None if absent."""
    oid = read_ref(repo.common_dir, branch_ref(branch))
    if oid is None:
        return None                               # no such branch: no pygit2 import at all
    cache_key = (str(repo.common_dir), oid)
    if cache_key in _BLOB_CACHE:
        return _BLOB_CACHE[cache_key]
    import pygit2  # lazily: ~170 ms, and most commands never get here

    where = f"{branch}:{PROJECT_FILE}"
    try:
        commit = open_repository(repo.common_dir)[oid].peel(pygit2.Commit)
        entry = commit.tree[PROJECT_FILE] if PROJECT_FILE in commit.tree else None
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise BadInput(f"cannot read branch {branch!r}: {exc}", where) from None
    if entry is None:
        text = None
    elif entry.filemode == pygit2.GIT_FILEMODE_LINK or not isinstance(entry, pygit2.Blob):
        raise BadInput(f"{PROJECT_FILE} is not a regular file on branch {branch!r}", where)
    else:
        text = _decode(_blob_data(repo, entry, where), where)
    if len(_BLOB_CACHE) > 64:
        _BLOB_CACHE.clear()
    _BLOB_CACHE[cache_key] = text
    return text


def _blob_data(repo: RepoPaths, blob: "pygit2.Blob", where: str) -> bytes:
    """The bytes of `blob`; in a partial clone that left them on its remote (`main` fetched
    ahead), brought from there first, as git would on reading them."""
    try:
        return blob.data
    except KeyError:                  # pygit2's NotFoundError
        if fetch_objects(repo, [str(blob.id)]):
            try:
                return open_repository(repo.common_dir)[blob.id].data
            except KeyError:
                pass
        raise BadInput(f"the content of {PROJECT_FILE} ({blob.id}) is not in this repository, and its remote "
                       "did not give it (offline?)", where) from None


@dataclass
class _Layer:
    label: str                  # "global: <path>", "project: <path>", "project: <branch>:.hive.toml"
    values: dict[str, Any]


def _project_layer(repo: RepoPaths, base_target: str, base_source: str,
                   env_target: str | None) -> tuple[_Layer | None, str, str]:
    """The trusted project layer, plus the target branch and where that came from.

    The target branch is needed to find the layer, so it is first resolved from
    defaults + global + env + the main worktree's own `.hive.toml`. If the file then read from a
    branch tip names another target branch (and the environment did not fix it), that branch is
    followed instead, so a stale checkout cannot make hive merge into the wrong branch.
    """
    main_file = project_path(repo)
    head_branch = _main_head_branch(repo)
    work_text: str | None = None
    work_read = False
    target, target_source = base_target, base_source
    if env_target is not None:
        target, target_source = env_target, f"env: {KEYS['target_branch'].env}"
    else:
        work_text, work_read = _read_text(main_file, project=True), True
        if work_text is not None:
            data = _parse_toml(work_text, str(main_file))
            if "target_branch" in data:
                problem = _problem("target_branch", data["target_branch"])
                if problem:
                    raise BadInput(problem, _at(str(main_file), work_text, "target_branch"))
                target, target_source = data["target_branch"], f"project: {main_file}"
    seen: list[str] = []
    while True:
        if head_branch == target:
            if not work_read:
                work_text, work_read = _read_text(main_file, project=True), True
            text, where = work_text, str(main_file)
        else:
            text, where = _read_branch_file(repo, target), f"{target}:{PROJECT_FILE}"
        if text is None:
            return None, target, target_source
        values = _validate_layer(_parse_toml(text, where), text, where)
        named = values.pop("target_branch", None)
        if env_target is not None or named is None:
            return _Layer(f"project: {where}", values), target, target_source
        if named == target:
            return _Layer(f"project: {where}", values), target, f"project: {where}"
        seen.append(target)
        if named in seen:
            raise BadInput(f"target_branch goes round in a loop: {' -> '.join(seen + [named])}",
                           _at(where, text, "target_branch"))
        target, target_source = named, f"project: {where}"


RECORDED_KEY = "hive.targetBranch"
RECORDED_SOURCE = f"recorded by init: {RECORDED_KEY} in .git/config"


def recorded_target_branch(repo: RepoPaths) -> str | None:
    """The target branch `git hive init` recorded for this repository (it replaces the built-in
    default `main`; every other layer still wins over it). None if none was recorded."""
    proc = run(["config", "--file", str(repo.common_dir / "config"), "--get", RECORDED_KEY],
               repo.common_dir, check=False)
    value = proc.stdout.strip() if proc.returncode == 0 else ""
    if not value:
        return None
    problem = _problem("target_branch", value)
    if problem:
        raise BadInput(f"{problem} (fix it with `git config {RECORDED_KEY} BRANCH`)",
                       str(repo.common_dir / "config"))
    return value


def pending(repo: RepoPaths) -> dict[str, Any]:
    """Keys the main worktree's `.hive.toml` sets to a value that is not in effect (because the
    file is not the one on the target branch, or a later layer wins): key -> the file's value."""
    path = project_path(repo)
    try:
        text = _read_text(path, project=True)
        data = {} if text is None else _parse_toml(text, str(path))
    except BadInput:
        return {}
    effective = load(repo).as_dict()
    held = unapproved(repo)   # told by their own warning
    return {k: v for k, v in data.items() if k in effective and effective[k] != v and k not in held}


def _env_layer() -> dict[str, Any]:
    values = {}
    for key in KEYS.values():
        text = os.environ.get(key.env)
        if text is not None:
            try:
                values[key.name] = parse_value(key.name, text)
            except BadInput as exc:
                raise BadInput(str(exc), key.env) from None
    return values


def _resolve(repo: RepoPaths | None, *, warn: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    values = {name: copy.deepcopy(key.default) for name, key in KEYS.items()}
    sources = dict.fromkeys(KEYS, "default")
    if repo is not None:
        recorded = recorded_target_branch(repo)
        if recorded is not None:
            values["target_branch"], sources["target_branch"] = recorded, RECORDED_SOURCE

    def apply(layer_values: dict[str, Any], label: str) -> None:
        for name, value in layer_values.items():
            values[name] = value
            sources[name] = label

    gpath = global_path()
    text = _read_text(gpath)
    if text is not None:
        apply(_validate_layer(_parse_toml(text, str(gpath)), text, str(gpath)), f"global: {gpath}")
    env = _env_layer()
    if repo is not None:
        layer, target, target_source = _project_layer(
            repo, values["target_branch"], sources["target_branch"], env.get("target_branch"))
        if layer is not None:
            apply(_approved_only(repo, layer, warn), layer.label)
        values["target_branch"], sources["target_branch"] = target, target_source
    for name, value in env.items():
        values[name], sources[name] = value, f"env: {KEYS[name].env}"
    return values, sources


# ---------------------------------------------------------------------------------------------
# What a person approved (DESIGN §7)

# Agents write the target branch, so its `.hive.toml` is not proof of a person's intent: these
# keys (they weaken containment or name a command) take effect from it only as approved here.
SENSITIVE = frozenset({"sandbox", "backend", "queen_backend", "worker_backend", "refinery_backend",
                       "test_command", "claude_command", "codex_command", "scripted_script", "codex",
                       "merge_mode"})
SAFE_VALUES = {"sandbox": "on", "merge_mode": "manual"}   # the stricter choice needs no approval
APPROVALS_FILE = "approved-config.json"   # in <common>/hive/: this machine's, never pushed
APPROVE_COMMAND = "git hive config approve"
_warned: set[tuple[str, str]] = set()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def approvals(repo: RepoPaths) -> dict[str, str]:
    """Key -> the canonical JSON of the value a person approved for it; a key absent is
    approved absent."""
    try:
        data = json.loads((repo.common_dir / "hive" / APPROVALS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.get("values", {}).items() if k in SENSITIVE and isinstance(v, str)} \
        if isinstance(data, dict) and isinstance(data.get("values"), dict) else {}


def _save_approvals(repo: RepoPaths, values: dict[str, str]) -> None:
    folder = repo.common_dir / "hive"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / APPROVALS_FILE
    _write(path, None, json.dumps({"values": dict(sorted(values.items()))}, indent=1) + "\n")


def approve(repo: RepoPaths, keys: Iterable[str] | None = None, path: Path | None = None) -> dict[str, Any]:
    """Approve what the project file hive reads now (or the file at `path`, one a person just
    wrote) sets for the sensitive `keys` (all of them by default), absent ones included; the
    values approved."""
    if path is not None:
        text = _read_text(path, project=True)
        current = _validate_layer(_parse_toml(text, str(path)), text, str(path)) if text is not None else {}
    else:
        layer, _, _ = _project_layer(repo, *_base_target(repo), _env_layer().get("target_branch"))
        current = layer.values if layer is not None else {}
    recorded = approvals(repo)
    for key in SENSITIVE if keys is None else set(keys) & SENSITIVE:
        if key in current:
            recorded[key] = _canonical(current[key])
        else:
            recorded.pop(key, None)
    _save_approvals(repo, recorded)
    return {k: v for k, v in current.items() if k in SENSITIVE}


def _base_target(repo: RepoPaths) -> tuple[str, str]:
    recorded = recorded_target_branch(repo)
    if recorded is not None:
        return recorded, RECORDED_SOURCE
    gpath = global_path()
    text = _read_text(gpath)
    values = _validate_layer(_parse_toml(text, str(gpath)), text, str(gpath)) if text is not None else {}
    if "target_branch" in values:
        return values["target_branch"], f"global: {gpath}"
    return KEYS["target_branch"].default, "default"


def unapproved(repo: RepoPaths) -> dict[str, Any]:
    """The sensitive keys the project file sets (or removes) otherwise than a person approved:
    key -> the file's value (None when it removes an approved one)."""
    layer, _, _ = _project_layer(repo, *_base_target(repo), _env_layer().get("target_branch"))
    return _unapproved(repo, layer.values if layer is not None else {})


def _unapproved(repo: RepoPaths, values: dict[str, Any]) -> dict[str, Any]:
    recorded = approvals(repo)
    found: dict[str, Any] = {}
    for key in sorted(SENSITIVE):
        mine = _canonical(values[key]) if key in values else None
        if mine != recorded.get(key) and not (key in SAFE_VALUES and values.get(key) == SAFE_VALUES[key]):
            found[key] = values.get(key)
    return found


def _approved_only(repo: RepoPaths, layer: _Layer, warn: bool = True) -> dict[str, Any]:
    """The project layer with each unapproved sensitive value replaced by the approved one (or
    dropped); unless told not to `warn`, one warning line per key and file, naming the approve
    command."""
    values = dict(layer.values)
    recorded = approvals(repo)
    for key in _unapproved(repo, values):
        if key in recorded:
            values[key] = json.loads(recorded[key])
        else:
            values.pop(key, None)
        if warn and (key, layer.label) not in _warned:
            _warned.add((key, layer.label))
            change = "changes" if key in layer.values else "removes"
            sys.stderr.write(f"git hive: warning: {layer.label.removeprefix('project: ')} {change} {key}, "
                             f"not approved on this machine: ignored (`{APPROVE_COMMAND}` approves it)\n")
    return values


def load(repo: RepoPaths | None, *, warn: bool = True) -> Config:
    """The effective configuration of all layers; `repo=None` skips the project layer.
    `warn=False`: no warning of unapproved values (`init` reads before it approves them)."""
    return Config(**_resolve(repo, warn=warn)[0])


def sources(repo: RepoPaths | None, *, warn: bool = True) -> dict[str, str]:
    """Key -> the layer that set its effective value: "default", "global: <path>",
    "project: <path>" or "project: <branch>:.hive.toml", "env: HIVE_<KEY>". `warn`: as `load`'s."""
    return _resolve(repo, warn=warn)[1]


# ---------------------------------------------------------------------------------------------
# Editing a file

def _split_key(key: str) -> list[str]:
    """`key`, or `codex.<a>.<b>` for an entry inside the `[codex]` table."""
    if key.startswith("codex."):
        parts = key.split(".")
        if all(_SUBKEY_RE.match(p) for p in parts[1:]):
            return parts
        raise BadInput(f"bad key {key!r}: use codex.<name>[.<name>...] with letters, digits, _ and -")
    if key not in KEYS:
        raise BadInput(_unknown(key))
    return [key]


def _load_doc(path: Path):
    import tomlkit  # writing only
    from tomlkit.exceptions import ParseError

    text = _read_text(path)
    try:
        return tomlkit.parse(text or ""), text
    except ParseError as exc:
        raise BadInput(f"invalid TOML: {exc}", f"{path}:{exc.line}") from None


def _write(path: Path, old: str | None, new: str) -> None:
    if old is not None and "\r\n" in old:
        new = re.sub(r"(?<!\r)\n", "\r\n", new)     # tomlkit writes new lines with \n
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(new)
        if old is not None:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def set_value(path: Path, key: str, value: str) -> None:
    """Set `key` to `value` (text, parsed and validated per the key's type) in the TOML file
    `path`, creating it if needed. Comments and the rest of the layout are kept as they are.

    `codex.<name>...` sets an entry inside the `[codex]` table; its value is read as a TOML value
    when it is one (`true`, `3`, `"x"`, `[...]`) and as a plain string otherwise.
    """
    import tomlkit

    path = Path(path)
    parts = _split_key(key)
    if len(parts) == 1:
        parsed = parse_value(key, value)
    else:
        try:
            parsed = tomllib.loads("v = " + value)["v"]
        except tomllib.TOMLDecodeError:
            parsed = value
    doc, old = _load_doc(path)
    table = doc
    for name in parts[:-1]:
        if name not in table:
            table[name] = tomlkit.table()
        table = table[name]
        if not isinstance(table, dict):
            raise BadInput(f"cannot set {key}: {name} is not a table", _at(str(path), old or "", parts[0]))
    table[parts[-1]] = parsed
    _write(path, old, doc.as_string())


def unset_value(path: Path, key: str) -> bool:
    """Remove `key` (or `codex.<name>...`) from the TOML file `path`, keeping everything else.
    Returns False when there was nothing to remove."""
    path = Path(path)
    parts = _split_key(key)
    if not path.exists():
        return False
    doc, old = _load_doc(path)
    table = doc
    for name in parts[:-1]:
        table = table.get(name)
        if not isinstance(table, dict):
            return False
    if parts[-1] not in table:
        return False
    del table[parts[-1]]
    _write(path, old, doc.as_string())
    return True
