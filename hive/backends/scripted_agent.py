"""A scripted agent: a real subprocess that follows a script instead of asking an LLM.

It is what the tests and `git hive demo` run behind the `scripted` backend
(`hive/backends/scripted.py`), so that every path of the orchestrator can be exercised with real
processes, real files and real commits. Standard library only: it starts hundreds of times in the
test suite.

    python -m hive.backends.scripted_agent --session-id S [--issue ID] [--role R] [--label L]...
        [--hive-dir DIR] [--script FILE] [--model M] [--system-prompt TEXT]

(the backend imports it as a top-level module with `python -I -S -c` (`hive.module_process`),
so it needs nothing but the stdlib).

Protocol (JSON lines, modelled on Claude Code's stream-json mode)
----------------------------------------------------------------
stdin, from the backend:
    {"type": "user", "text": "..."}                  a user turn (Claude's shape
                                                     {"type":"user","message":{"content":"..."}}
                                                     is accepted too)
    {"type": "permission_response", "request_id": R, "allow": true|false, "message": "..."}
    closing stdin ends the process with exit code 0 (after the turn in progress, if any).

stdout, to the backend:
    {"type": "init", "session_id", "pid", "script"}  once at start; `script` names the entry
                                                     chosen (e.g. "issues.hv-1a2b3c", "builtin")
    {"type": "busy"}                                 a turn started (one per user turn)
    {"type": "message", "text": "..."}               the agent said something
    {"type": "usage", "input_tokens": N, "output_tokens": N, "cost_usd": X,
     "cache_write_tokens": N, "cache_read_tokens": N}
                                                     tokens spent by one step (a *delta*: the
                                                     backend adds them up into session totals)
    {"type": "permission", "request_id", "tool", "command", "paths": [...], "input": {...}}
                                                     then the agent waits for the answer
    {"type": "provider_error", "status": N, "message": "..."}
    {"type": "result", "ok": bool, "error": "...", "provider_error": bool, "text": "..."}
                                                     exactly one at the end of each turn,
                                                     unless the process dies first
Turns are handled one at a time, in order; a turn sent while another runs is queued.

Turns
-----
Each turn runs the chosen script from the top, so a same-session retry is simply another turn.
A turn whose text starts with `FYI:` (notes relayed from sibling workers) is only recorded: it
gets `busy` and an ok `result` but runs no step and does not count as an attempt.

Every received turn is appended to `<hive_dir>/scripted/<key>.prompts.jsonl`
(`{"session", "issue", "role", "text", "fyi", "at"}`), so tests can read prompts after the
session is gone; each agent start appends `{"session", "issue", "role", "labels", "script",
"model", "system_prompt", "cwd", "pid", "at"}` to `<key>.sessions.jsonl`. Each script run (non-FYI turn) bumps the per-issue attempt counter
`<hive_dir>/scripted/<key>.attempts` (a decimal number) first. `<key>` is the issue id, or
`role-<role>` for sessions without one. With no `--hive-dir`, hive_dir is
`<git-common-dir of cwd>/hive`.

Script files (TOML or JSON; chosen by the user, never read from `hive/state`)
----------------------------------------------------------------------------
    default = [steps...]                 any session
    labels.<label> = [steps...]          the first of the issue's labels (in its order) with an entry
    issues.<issue-id> = [steps...]       that issue
    roles.<role> = [steps...]            worker | refinery | queen
Precedence: issues > labels > roles > default > the built-in script for the role (BUILTIN below:
a worker writes `hive-work/<issue>.txt` with the prompt's first line, commits it and writes a
success result). In TOML, use arrays of tables: `[[issues.hv-1a2b3c]]` then `crash = 3`.

Steps
-----
A step is a table with exactly one *action* key, the options of that action, and optionally the
common keys `ask`, `on_deny`, `on_attempts`, `comment`.

    {"say": TEXT}                                    emit a message
    {"cd": PATH}                                     work in PATH for the rest of this turn
                                                     (e.g. "{worktree}" in a refinery task)
    {"write": PATH, "content": TEXT}                 create/overwrite a file (dirs created)
    {"append": PATH, "content": TEXT}                append to a file
    {"edit": PATH, "find": TEXT, "replace": TEXT, "count": N}
                                                     replace the first N occurrences (0 = all);
                                                     the turn fails if `find` is absent
    {"run": CMD, "must_succeed": false, "timeout": SECONDS}
                                                     `sh -c CMD` in cwd, output captured and told
                                                     as a message; a non-zero exit with
                                                     must_succeed ends the turn as failed
    {"spawn": CMD, "pid_file": PATH}                 start CMD in the background (same process
                                                     group); says "spawned pid N"; it outlives the
                                                     step (for abort tests)
    {"note": TEXT, "category": "discovery"}          append {"category","content"} to
                                                     .hive-notes.jsonl
    {"commit": MESSAGE, "allow_empty": false}        git add -A (never .hive-result.jsonl or
                                                     .hive-notes.jsonl) + git commit; nothing to
                                                     commit is not an error
    {"tokens": {"input": N, "output": N, "cost_usd": X, "cache_write": N, "cache_read": N}}
                                                     report usage (input: uncached)
    {"exceed_budget": true | N}                      report N (true: 1,000,000,000) input tokens
    {"result": STATUS, "summary": TEXT, "test_command": CMD, "path": ".hive-result.jsonl"}
                                                     write {"status","summary"[,"test_command"]}
                                                     as one JSON line (overwrites); STATUS may also
                                                     be a whole object, written as it is
    {"result_raw": TEXT, "path": ...}                write TEXT verbatim (garbage-result tests)
    {"fail_times": N, "summary": TEXT}               on attempts 1..N: write a failure result and
                                                     end the turn (ok); later attempts go on
    {"needs_fact": TEXT, "summary": TEXT}            a turn whose prompt lacks TEXT: write a failure
                                                     result and end the turn (ok), as an agent
                                                     that needed a fact (a note) it was not told
    {"sleep": SECONDS}
    {"linger": SECONDS}                              once stdin closes (the session ends), take
                                                     SECONDS to exit, as a CLI saving its session
    {"hang": true}                                   block until killed (ignores stdin closing)
    {"crash": CODE}                                  exit at once with CODE (true: 1), no result
                                                     line, no result file
    {"exit": CODE}                                   end the turn normally (ok result line), then
                                                     exit with CODE (true: 0): "finished without
                                                     writing a result"
    {"end_turn": true}                               end the turn now (ok), skipping later steps
    {"turn_error": TEXT}                             end the turn as failed (result ok=false)
    {"provider_error": STATUS, "message": TEXT}      emit a provider_error line, end the turn as
                                                     failed with provider_error=true
    {"flood": BYTES, "lines": 1}                     write BYTES of non-JSON garbage per line on
                                                     stdout (backend robustness tests)

Common keys:
    "ask": true | {"tool", "command", "paths"}      ask permission first (tool/command/paths are
                                                     inferred from the action when not given:
                                                     run/spawn/commit -> Bash, write/append/note ->
                                                     Write, edit -> Edit); a denied step is skipped
    "on_deny": "skip" | "fail" | "end"               denied: skip the step (default), write a
                                                     failure result and end the turn, or end the
                                                     turn without a result
    "on_attempts": [N, ...]                          run the step only on these attempt numbers
    "comment": TEXT                                  ignored

Strings in steps (except `result_raw`) expand `{issue}`, `{role}`, `{session}`, `{attempt}`,
`{labels}` (comma-separated), `{prompt}`, `{prompt_first_line}`, `{last_exit}`, and from
hive's refinery task prompts `{worktree}` and `{target}` (their `worktree: ` / `target: ` lines), from
the Queen's `{spec}` and `{prefix}` (its `Plan this spec: ` / `id prefix: ` lines), and `{new_id}`
(an issue id of the session's own, the same for one turn); other braces are left alone.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

RESULT_FILE = ".hive-result.jsonl"
NOTES_FILE = ".hive-notes.jsonl"
FYI_PREFIX = "FYI:"
HUGE_USAGE = 1_000_000_000
MAX_TEXT = 64 * 1024          # longest message text the agent emits

BUILTIN: dict[str, list[dict]] = {
    "worker": [
        {"say": "Working on {issue}: {prompt_first_line}"},
        {"write": "hive-work/{issue}.txt", "content": "{prompt_first_line}\n"},
        {"commit": "{issue}: {prompt_first_line}"},
        {"tokens": {"input": 1200, "output": 300}},
        {"result": "success", "summary": "Wrote hive-work/{issue}.txt"},
    ],
    # The refinery is called when the mechanical merge needed help; the scripted one claims the
    # merge is fine. Give a `roles.refinery` entry to act otherwise.
    "refinery": [
        {"cd": "{worktree}"},
        {"tokens": {"input": 800, "output": 100}},
        {"result": {"status": "merged", "summary": "scripted refinery: nothing to resolve"}},
    ],
    # The Queen proposes one issue: the spec's first line as its title, the spec as its description.
    "queen": [
        {"cd": "{worktree}"},
        {"write": "issues/{new_id}.md",
         "content": "+++\ntitle = '''{spec}'''\nstatus = \"open\"\npriority = 2\ntype = \"task\"\n"
                    "depends_on = []\nlabels = []\n+++\n\nProposed by the scripted Queen for the spec:\n{spec}\n"},
        {"tokens": {"input": 500, "output": 50}},
        {"say": "Scripted queen: proposed {new_id} for the spec."},
        {"end_turn": True},
    ],
}

# action key -> its own option keys
ACTIONS: dict[str, frozenset[str]] = {
    "say": frozenset(),
    "cd": frozenset(),
    "write": frozenset({"content"}),
    "append": frozenset({"content"}),
    "edit": frozenset({"find", "replace", "count"}),
    "run": frozenset({"must_succeed", "timeout"}),
    "spawn": frozenset({"pid_file"}),
    "note": frozenset({"category"}),
    "commit": frozenset({"allow_empty"}),
    "tokens": frozenset(),
    "exceed_budget": frozenset(),
    "result": frozenset({"summary", "test_command", "path"}),
    "result_raw": frozenset({"path"}),
    "fail_times": frozenset({"summary"}),
    "needs_fact": frozenset({"summary"}),
    "sleep": frozenset(),
    "linger": frozenset(),
    "hang": frozenset(),
    "crash": frozenset(),
    "exit": frozenset(),
    "end_turn": frozenset(),
    "turn_error": frozenset(),
    "provider_error": frozenset({"message"}),
    "flood": frozenset({"lines"}),
}
COMMON_KEYS = frozenset({"ask", "on_deny", "on_attempts", "comment"})
SECTIONS = ("default", "labels", "issues", "roles")


class ScriptError(ValueError):
    """The script file is unreadable or malformed."""


# ----------------------------------------------------------------------------------------------
# script files


def load_script(path: str) -> dict:
    """Read and validate a script file (TOML or JSON, by extension, else JSON then TOML)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ScriptError(f"cannot read script: {e.strerror or e}") from None
    text = raw.decode("utf-8", errors="replace")
    lower = path.lower()
    data = None
    if not lower.endswith(".toml"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            if lower.endswith(".json"):
                raise ScriptError(f"invalid JSON at line {e.lineno}: {e.msg}") from None
    if data is None:
        import tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ScriptError(f"invalid TOML: {e}") from None
    validate_script(data)
    return data


def validate_script(data: object) -> None:
    if not isinstance(data, dict):
        raise ScriptError("a script is a table with default/labels/issues/roles entries")
    for key, value in data.items():
        if key not in SECTIONS:
            raise ScriptError(f"unknown top-level key {key!r} (one of {', '.join(SECTIONS)})")
        if key == "default":
            _validate_steps(value, "default")
            continue
        if not isinstance(value, dict):
            raise ScriptError(f"{key} must be a table of step lists")
        for name, steps in value.items():
            _validate_steps(steps, f"{key}.{name}")


def _validate_steps(steps: object, where: str) -> None:
    if not isinstance(steps, list):
        raise ScriptError(f"{where} must be a list of steps")
    for i, step in enumerate(steps, 1):
        here = f"{where}[{i}]"
        if not isinstance(step, dict):
            raise ScriptError(f"{here}: a step is a table")
        actions = [k for k in step if k in ACTIONS]
        if len(actions) != 1:
            raise ScriptError(f"{here}: a step needs exactly one action key "
                              f"(one of {', '.join(ACTIONS)}), got {sorted(step)}")
        action = actions[0]
        extra = set(step) - {action} - ACTIONS[action] - COMMON_KEYS
        if extra:
            raise ScriptError(f"{here}: unknown key(s) {sorted(extra)} for {action!r}")
        if step.get("on_deny", "skip") not in ("skip", "fail", "end"):
            raise ScriptError(f"{here}: on_deny is skip, fail or end")
        attempts = step.get("on_attempts", [])
        if not isinstance(attempts, list) or not all(isinstance(n, int) for n in attempts):
            raise ScriptError(f"{here}: on_attempts is a list of attempt numbers")
        value = step[action]
        if action in ("write", "append", "edit", "run", "spawn", "note", "commit", "say",
                      "turn_error", "result_raw", "needs_fact") and not isinstance(value, str):
            raise ScriptError(f"{here}: {action} takes a string")
        if action in ("sleep", "linger", "fail_times", "flood", "crash", "exit", "provider_error") and (
                not isinstance(value, (int, float))
                or (isinstance(value, bool) and action not in ("crash", "exit"))):
            raise ScriptError(f"{here}: {action} takes a number")
        if action == "tokens" and not isinstance(value, dict):
            raise ScriptError(f"{here}: tokens takes {{input, output}}")
        if action == "result" and not isinstance(value, (str, dict)):
            raise ScriptError(f"{here}: result takes a status or an object")
        if action == "edit" and "find" not in step:
            raise ScriptError(f"{here}: edit needs find")


def select_steps(data: dict | None, issue: str, labels: list[str] | tuple[str, ...],
                 role: str) -> tuple[str, list[dict]]:
    """(name of the chosen entry, its steps): issue > first label > role > default > built-in."""
    data = data or {}
    issues = data.get("issues", {})
    if issue and issue in issues:
        return f"issues.{issue}", issues[issue]
    by_label = data.get("labels", {})
    for label in labels:
        if label in by_label:
            return f"labels.{label}", by_label[label]
    roles = data.get("roles", {})
    if role in roles:
        return f"roles.{role}", roles[role]
    if "default" in data:
        return "default", data["default"]
    return "builtin", BUILTIN.get(role, BUILTIN["worker"])


def state_key(issue: str, role: str) -> str:
    """File-name-safe key for the per-issue files under <hive_dir>/scripted/."""
    key = issue or f"role-{role or 'worker'}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", key).lstrip(".") or "_"


# ----------------------------------------------------------------------------------------------
# the running agent


class EndTurn(Exception):
    def __init__(self, ok: bool = True, error: str = "", provider_error: bool = False,
                 exit_code: int | None = None):
        super().__init__(error)
        self.ok, self.error, self.provider_error, self.exit_code = ok, error, provider_error, exit_code


class StepFailed(Exception):
    pass


_PLACEHOLDER = re.compile(
    r"\{(issue|role|session|attempt|labels|prompt|prompt_first_line|last_exit|worktree|target|spec|prefix|"
    r"new_id)\}")
# hive's refinery tasks name their worktree and target on lines of their own ("worktree: /abs/path");
# the Queen's first prompt its spec ("Plan this spec: ...") and the id prefix
_PROMPT_FIELD = re.compile(r"^(worktree|target|Plan this spec|id prefix): (.+)$", re.MULTILINE)
_FIELD_NAMES = {"Plan this spec": "spec", "id prefix": "prefix"}
_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"    # issue ids' (hive.state.issue_file)


class Agent:
    def __init__(self, session: str, issue: str, role: str, labels: list[str], hive_dir: str,
                 script_name: str, steps: list[dict]):
        self.session, self.issue, self.role, self.labels = session, issue, role, labels
        self.hive_dir, self.script_name, self.steps = hive_dir, script_name, steps
        self.cwd = self.home = os.getcwd()
        self.fields: dict[str, str] = {}      # named on lines of the prompts (worktree, spec, ...)
        self.key = state_key(issue, role)
        self.turns: queue.Queue = queue.Queue()
        self.answers: dict[str, dict] = {}
        self.cond = threading.Condition()
        self.eof = False
        self.linger = 0.0                 # seconds to exit once stdin closes (`linger`)
        self.out = sys.stdout.buffer
        self.perm_seq = 0
        # per-turn
        self.prompt = ""
        self.attempt = 0
        self.last_exit = ""
        self.last_text = ""

    # -- io ------------------------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        try:
            self.out.write(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            os._exit(0)        # nobody listens any more

    def say(self, text: str) -> None:
        text = text[:MAX_TEXT]
        self.last_text = text
        self.emit({"type": "message", "text": text})

    def read_stdin(self) -> None:
        for raw in sys.stdin.buffer:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            kind = msg.get("type")
            if kind == "user":
                text = msg.get("text")
                if text is None and isinstance(msg.get("message"), dict):
                    text = msg["message"].get("content", "")
                    if isinstance(text, list):          # Claude's content blocks
                        text = "".join(b.get("text", "") for b in text if isinstance(b, dict))
                self.turns.put(str(text or ""))
            elif kind == "permission_response":
                with self.cond:
                    self.answers[str(msg.get("request_id"))] = msg
                    self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()
        self.turns.put(None)

    # -- state files ---------------------------------------------------------------------------
    def _state_path(self, suffix: str) -> str:
        d = os.path.join(self.hive_dir, "scripted")
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, self.key + suffix)

    def _append_line(self, suffix: str, obj: dict) -> None:
        line = json.dumps(obj, ensure_ascii=False).encode() + b"\n"
        fd = os.open(self._state_path(suffix), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def record_start(self, model: str, system_prompt: str) -> None:
        self._append_line(".sessions.jsonl", {
            "session": self.session, "issue": self.issue, "role": self.role,
            "labels": self.labels, "script": self.script_name, "model": model,
            "system_prompt": system_prompt, "cwd": self.cwd, "pid": os.getpid(),
            "at": time.time()})

    def record_prompt(self, text: str, fyi: bool) -> None:
        self._append_line(".prompts.jsonl", {"session": self.session, "issue": self.issue,
                                             "role": self.role, "text": text, "fyi": fyi,
                                             "at": time.time()})

    def bump_attempt(self) -> int:
        import fcntl
        fd = os.open(self._state_path(".attempts"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 64).strip()
            n = (int(raw) if raw.isdigit() else 0) + 1
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, f"{n}\n".encode())
            return n
        finally:
            os.close(fd)

    # -- turns ---------------------------------------------------------------------------------
    def serve(self) -> int:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        self.emit({"type": "init", "session_id": self.session, "pid": os.getpid(),
                   "script": self.script_name})
        while True:
            text = self.turns.get()
            if text is None:
                time.sleep(self.linger)
                return 0
            code = self.turn(text)
            if code is not None:
                return code

    def turn(self, text: str) -> int | None:
        self.emit({"type": "busy"})
        fyi = text.lstrip().startswith(FYI_PREFIX)
        self.record_prompt(text, fyi)
        if fyi:
            self.emit({"type": "result", "ok": True, "error": "", "provider_error": False,
                       "text": "noted"})
            return None
        self.prompt, self.last_exit, self.last_text = text, "", ""
        self.cwd = self.home
        self.attempt = self.bump_attempt()
        end = EndTurn()
        try:
            for i, step in enumerate(self.steps, 1):
                try:
                    self.step(step)
                except StepFailed as e:
                    action = next(k for k in step if k in ACTIONS)
                    raise EndTurn(False, f"step {i} ({action}): {e}") from None
        except EndTurn as e:
            end = e
        self.emit({"type": "result", "ok": end.ok, "error": end.error,
                   "provider_error": end.provider_error, "text": self.last_text})
        return end.exit_code

    # -- steps ---------------------------------------------------------------------------------
    def expand(self, value):
        if isinstance(value, str):
            first = self.prompt.strip().splitlines()[0].strip() if self.prompt.strip() else ""
            for name, text in _PROMPT_FIELD.findall(self.prompt):   # kept for the later turns
                self.fields[_FIELD_NAMES.get(name, name)] = text.strip()
            values = {"issue": self.issue, "role": self.role, "session": self.session,
                      "attempt": str(self.attempt), "labels": ",".join(self.labels),
                      "prompt": self.prompt, "prompt_first_line": first,
                      "last_exit": str(self.last_exit), "worktree": self.cwd, "target": "",
                      "spec": "", "prefix": "hv", **self.fields}
            return _PLACEHOLDER.sub(lambda m: self.new_id(values["prefix"]) if m.group(1) == "new_id"
                                    else values[m.group(1)], value)
        if isinstance(value, list):
            return [self.expand(v) for v in value]
        if isinstance(value, dict):
            return {k: self.expand(v) for k, v in value.items()}
        return value

    def new_id(self, prefix: str) -> str:
        """An issue id of this session's own, the same for all of one turn's steps."""
        import hashlib   # here: most turns need no id, and each agent start pays for its imports

        digest = hashlib.sha256(f"{self.session}:{self.attempt}".encode()).digest()
        return prefix + "-" + "".join(_ID_ALPHABET[b % 32] for b in digest[:6])

    def path(self, rel: str) -> str:
        return os.path.join(self.cwd, rel)

    def step(self, raw: dict) -> None:
        attempts = raw.get("on_attempts")
        if attempts and self.attempt not in attempts:
            return
        action = next(k for k in raw if k in ACTIONS)
        step = {k: (v if action == "result_raw" and k == action else self.expand(v))
                for k, v in raw.items()}
        value = step[action]
        if step.get("ask") and not self.ask_permission(action, step):
            return
        getattr(self, "do_" + action)(value, step)

    def ask_permission(self, action: str, step: dict) -> bool:
        ask = step["ask"] if isinstance(step["ask"], dict) else {}
        value = step[action]
        tool, command, paths = "Bash", "", []
        if action in ("run", "spawn"):
            command = value
        elif action == "commit":
            command = f"git commit -m {json.dumps(value)}"
        elif action in ("write", "append"):
            tool, paths = "Write", [value]
        elif action == "edit":
            tool, paths = "Edit", [value]
        elif action == "note":
            tool, paths = "Write", [NOTES_FILE]
        elif action in ("result", "result_raw", "fail_times", "needs_fact"):
            tool, paths = "Write", [step.get("path", RESULT_FILE)]
        tool = ask.get("tool", tool)
        command = ask.get("command", command)
        paths = list(ask.get("paths", paths))
        self.perm_seq += 1
        rid = f"perm-{self.perm_seq}"
        tool_input = {"command": command} if command else {"file_path": paths[0] if paths else ""}
        self.emit({"type": "permission", "request_id": rid, "tool": tool, "command": command,
                   "paths": paths, "input": tool_input})
        with self.cond:
            while rid not in self.answers and not self.eof:
                self.cond.wait()
            answer = self.answers.pop(rid, {"allow": False, "message": "stdin closed"})
        if answer.get("allow"):
            return True
        why = str(answer.get("message") or "denied")
        self.say(f"Permission denied for {tool} {command or ' '.join(paths)}: {why}")
        on_deny = step.get("on_deny", "skip")
        if on_deny == "fail":
            self.write_result({"status": "failure", "summary": f"permission denied: {why}"})
            raise EndTurn(True)
        if on_deny == "end":
            raise EndTurn(True)
        return False

    def write_result(self, obj: dict, path: str = RESULT_FILE) -> None:
        self._write(path, json.dumps(obj, ensure_ascii=False) + "\n", "w")

    def _write(self, rel: str, content: str, mode: str) -> None:
        full = self.path(rel)
        parent = os.path.dirname(full)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(full, mode, encoding="utf-8") as f:
                f.write(content)
        except OSError as e:
            raise StepFailed(f"{rel}: {e.strerror or e}") from None

    def do_cd(self, value, step):
        target = self.path(value)
        if not os.path.isdir(target):
            raise StepFailed(f"no such directory: {target}")
        self.cwd = target

    def do_say(self, value, step):
        self.say(value)

    def do_write(self, value, step):
        self._write(value, str(step.get("content", "")), "w")

    def do_append(self, value, step):
        self._write(value, str(step.get("content", "")), "a")

    def do_edit(self, value, step):
        try:
            with open(self.path(value), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise StepFailed(f"{value}: {e.strerror or e}") from None
        find, replace = str(step["find"]), str(step.get("replace", ""))
        if find not in text:
            raise StepFailed(f"{value}: text to replace not found")
        count = int(step.get("count", 0))
        self._write(value, text.replace(find, replace, count if count > 0 else -1), "w")

    def do_run(self, value, step):
        timeout = step.get("timeout")
        try:
            done = subprocess.run(value, shell=True, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=float(timeout) if timeout else None)
            code, output = done.returncode, done.stdout
        except subprocess.TimeoutExpired as e:
            code, output = 124, e.output or b""
        self.last_exit = code
        tail = output[-2000:].decode("utf-8", errors="replace")
        self.say(f"$ {value}\n(exit {code})\n{tail}".rstrip())
        if code != 0 and step.get("must_succeed"):
            said = [ln for ln in tail.splitlines() if ln.strip()]
            # the line naming the error: git's first `fatal:`/`error:`, else the last words
            errors = [ln for ln in said if ln.startswith(("fatal:", "error:"))]
            why = (errors or said[-1:] or [""])[0][:300]
            raise EndTurn(False, f"command failed with exit {code}: {value}" + (f" — {why}" if why else ""))

    def do_spawn(self, value, step):
        try:
            child = subprocess.Popen(value, shell=True, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError as e:
            raise StepFailed(f"cannot spawn: {e.strerror or e}") from None
        if step.get("pid_file"):
            self._write(step["pid_file"], f"{child.pid}\n", "w")
        self.say(f"spawned pid {child.pid}")

    def do_note(self, value, step):
        line = json.dumps({"category": step.get("category", "discovery"), "content": value},
                          ensure_ascii=False)
        self._write(NOTES_FILE, line + "\n", "a")

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=self.cwd, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)

    def do_commit(self, value, step):
        added = self._git("add", "-A")
        if added.returncode != 0:
            raise StepFailed(f"git add: {added.stderr.strip()[-500:]}")
        # never commit the protocol files, whether or not an exclude rule already hides them
        self._git("rm", "-q", "--cached", "--ignore-unmatch", "--", RESULT_FILE, NOTES_FILE)
        ident: list[str] = []
        if not (os.environ.get("GIT_AUTHOR_NAME") and os.environ.get("GIT_AUTHOR_EMAIL")):   # a jail sets both
            have = self._git("config", "--get-regexp", r"^user\.(name|email)$").stdout
            if "user.name " not in have and not os.environ.get("GIT_AUTHOR_NAME"):
                ident += ["-c", "user.name=hive scripted agent"]
            if "user.email " not in have and not os.environ.get("GIT_AUTHOR_EMAIL"):
                ident += ["-c", "user.email=scripted-agent@hive.invalid"]
        allow_empty = bool(step.get("allow_empty"))
        args = [*ident, "-c", "commit.gpgsign=false", "commit", "-q", "-m", value or "scripted work"]
        if allow_empty:
            args.append("--allow-empty")
        done = self._git(*args)
        if done.returncode == 0:
            return
        # asked only now: most commit steps have something to commit
        if not allow_empty and self._git("diff", "--cached", "--quiet").returncode == 0:
            self.say("Nothing to commit.")
            return
        raise StepFailed(f"git commit: {(done.stderr or done.stdout).strip()[-500:]}")

    def do_tokens(self, value, step):
        self.emit({"type": "usage", "input_tokens": int(value.get("input", 0)),
                   "output_tokens": int(value.get("output", 0)),
                   "cache_write_tokens": int(value.get("cache_write", 0)),
                   "cache_read_tokens": int(value.get("cache_read", 0)),
                   "cost_usd": float(value.get("cost_usd", 0.0))})

    def do_exceed_budget(self, value, step):
        n = HUGE_USAGE if value is True or not isinstance(value, int) else value
        self.emit({"type": "usage", "input_tokens": n, "output_tokens": 0, "cost_usd": 0.0})

    def do_result(self, value, step):
        if isinstance(value, dict):
            obj = value
        else:
            obj = {"status": value, "summary": step.get("summary", f"scripted {value}")}
            if "test_command" in step:
                obj["test_command"] = step["test_command"]
        self.write_result(obj, step.get("path", RESULT_FILE))

    def do_result_raw(self, value, step):
        self._write(step.get("path", RESULT_FILE), value, "w")

    def do_fail_times(self, value, step):
        if self.attempt <= value:
            summary = step.get("summary", f"scripted failure on attempt {self.attempt} "
                                          f"(the first {value} fail)")
            self.write_result({"status": "failure", "summary": summary})
            self.say(summary)
            raise EndTurn(True)

    def do_needs_fact(self, value, step):
        if str(value) not in self.prompt:
            summary = step.get("summary", "scripted failure: the prompt did not say what the work needs")
            self.write_result({"status": "failure", "summary": summary})
            self.say(summary)
            raise EndTurn(True)

    def do_sleep(self, value, step):
        time.sleep(float(value))

    def do_linger(self, value, step):
        self.linger = float(value)

    def do_hang(self, value, step):
        while True:
            time.sleep(3600)

    def do_crash(self, value, step):
        try:
            self.out.flush()
        finally:
            os._exit(int(value) if value is not True else 1)

    def do_exit(self, value, step):
        raise EndTurn(True, exit_code=int(value) if value is not True else 0)

    def do_end_turn(self, value, step):
        raise EndTurn(True)

    def do_turn_error(self, value, step):
        raise EndTurn(False, value or "scripted turn error")

    def do_provider_error(self, value, step):
        message = str(step.get("message", "provider error"))
        self.emit({"type": "provider_error", "status": int(value), "message": message})
        raise EndTurn(False, f"provider error {int(value)}: {message}", provider_error=True)

    def do_flood(self, value, step):
        chunk = b"x" * (1 << 20)
        for _ in range(int(step.get("lines", 1))):
            left = int(value)
            try:
                while left > 0:
                    self.out.write(chunk[:left])
                    left -= len(chunk)
                self.out.write(b"\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):
                os._exit(0)


def _default_hive_dir() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0 and done.stdout.strip():
            return os.path.join(os.path.abspath(done.stdout.strip()), "hive")
    except OSError:
        pass
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"hive-scripted-{os.getuid()}")


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="scripted_agent", description=__doc__.split("\n")[0])
    parser.add_argument("--session-id", default="")
    parser.add_argument("--issue", default="")
    parser.add_argument("--role", default="worker")
    parser.add_argument("--label", action="append", default=[])
    parser.add_argument("--hive-dir", default="")
    parser.add_argument("--script", default="")
    parser.add_argument("--model", default="")
    parser.add_argument("--system-prompt", default="")
    args = parser.parse_args(argv)
    try:
        data = load_script(args.script) if args.script else None
    except ScriptError as e:
        print(f"scripted_agent: {args.script}: {e}", file=sys.stderr)
        return 2
    name, steps = select_steps(data, args.issue, args.label, args.role)
    agent = Agent(args.session_id, args.issue, args.role, args.label,
                  args.hive_dir or _default_hive_dir(), name, steps)
    agent.record_start(args.model, args.system_prompt)
    code = agent.serve()
    # the stdin reader thread may still be blocked in a read: leave without joining it (a
    # normal interpreter shutdown would abort on the stdin buffer's lock)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
