"""The `codex` backend: drives `codex app-server` (newline-delimited JSON-RPC on stdio).

Modules: `backend` (CodexBackend: sessions, turns, events), `rpc` (the JSON-RPC client of one
app-server process), `home` (hive's CODEX_HOME: config.toml and auth), `pricing` (USD from
tokens), `health` (the provider probe), `sandbox` (the git dirs left writable), `errors` (which
errors are the provider's).

Process model — **one app-server process per session**, started in the session's worktree, in its
own process group. Reasons: a session's environment (`SessionSpec.env`: HIVE_ISSUE, ...) reaches
the agent's commands only as the environment of the process that runs them, and app-server has no
per-thread environment; a crash, a hang or a kill touches one session only; abort-by-kill and
hive's crash recovery (`killpg(pid)` of the agents table) need one process group per agent; and a
process costs ~0.5 s to start, which is nothing next to a turn. The session id is Codex's thread id.

Protocol, per process (facts in `../shared/reference/cli-protocols.md`):

    >> initialize {clientInfo: {name: "git-hive", ...}, capabilities: {experimentalApi: false}}
    >> initialized
    >> thread/start {cwd, approvalPolicy, sandbox, model, developerInstructions,
                     config: {sandbox_workspace_write: {writable_roots: [git dirs]}}}
       or thread/resume {threadId, excludeTurns: true, cwd, approvalPolicy, sandbox, model, config}
    >> turn/start {threadId, input: [{type: "text", text, text_elements: []}]}
    << turn/started, item/started|completed, thread/tokenUsage/updated, error, turn/completed
    << item/commandExecution/requestApproval | item/fileChange/requestApproval  (server requests)
    >> {id, result: {decision: "accept" | "decline"}}                         (reply_permission)
    >> turn/interrupt {threadId, turnId}                                      (abort_session)

Events (the same contract as `hive/backends/scripted.py`):

    busy              a turn starts (each `send_message_async` gets one busy and one idle)
    message           {"role": "assistant", "text"} for agent messages; {"role": "tool", "text"}
                      for finished commands / file changes and long commands' progress;
                      {"role": "system", "text"} for errors Codex retries by itself
    usage             Usage: session totals (`tokenUsage.total`), cost estimated (see below)
    permission        PermissionRequest: tool "commandExecution" (command = the shell line without
                      the `/bin/bash -lc` wrapper, paths = [its cwd]) or "fileChange" (paths = the
                      files the patch touches, plus a requested grantRoot)
    provider_error    {"status": int | None, "message"} when the API fails (codexErrorInfo such as
                      internalServerError, serverOverloaded, rateLimitExceeded, unauthorized,
                      httpConnectionFailed / responseStream*{httpStatusCode}); the turn then ends
                      with TurnResult(ok=False, provider_error=True). Errors Codex will retry
                      itself (`willRetry`) are only `message`s.
    idle              TurnResult at `turn/completed`: completed → ok; interrupted → not ok
                      ("aborted" when hive asked); failed → not ok with Codex's error message
    exited            {"exit_code"} when the app-server process ends; an open turn first gets
                      idle(ok=False) (and every queued turn one too)

Semantics: turns sent while one runs are queued here and started in order (app-server would fold
them into the running turn). `abort_session` interrupts the running turn (`turn/interrupt`), drops
queued ones and returns once their idles were emitted; if Codex does not answer within
`interrupt_timeout` the process group is killed. The process stays alive after an interrupt.
`delete_session` closes stdin, waits `kill_grace`, kills the group; no events of that session
follow. A session whose process died (crash, kill, a request that timed out — "stopped answering")
reports state "exited"; `create_session(spec with resume=<id>)` or `send_message_async` restart
the app-server and `thread/resume` the thread (history from `$CODEX_HOME/sessions`), so usage and
context carry on. If the thread cannot be resumed, a new thread starts and its new id is returned.

Sandbox and approvals: `approvalPolicy` "untrusted" — Codex asks before every command that is not
known to be read-only and before every patch, so hive's policy (hive/agents/permissions.py)
decides — and `sandbox` "workspace-write" with the git directories a commit in a linked worktree
needs made writable (the worktree's admin dir `<common>/worktrees/<name>` and the common dir
`<common>`, found from the cwd's `.git` file; for a cwd that is not a worktree, such as the
refinery's directory of worktrees, those of the worktrees directly inside it). The common dir holds
refs and hooks, so its writability is a trade-off (commands are still approved one by one).
`approval_policy` / `sandbox_mode` in the user's `[codex]` table override these two.

Model: `SessionSpec.model` unless it names a Claude model (hive's defaults are Claude models);
then the `[codex]` table's `model`; else Codex's own default.

CODEX_HOME: a private one per project at `<hive_dir>/codex-home/`, with a `config.toml` that hive
rewrites on start: these defaults (offline and quiet), with the user's `[codex]` table merged over
them (the user wins, key by key, tables recursively):

    check_for_update_on_startup = false
    [analytics]  enabled = false          # no ab.chatgpt.com
    [feedback]   enabled = false
    [features]   plugins = false          # no git clone of openai/plugins, no api.github.com
                 remote_plugin = false
                 apps = false
                 shell_snapshot = false   # no `bash -lc` snapshot helpers outliving codex

Auth: the environment is passed through (OPENAI_API_KEY, a provider's `env_key`, proxies). A user
login is honoured: `<hive_dir>/codex-home/auth.json` is made a symlink to the user's own
`$CODEX_HOME/auth.json` (else `~/.codex/auth.json`) when that exists and hive's has none. To log
in for hive only: `CODEX_HOME=<git-common-dir>/hive/codex-home codex login` (or
`... codex login --with-api-key < keyfile`).

Cost: Codex reports tokens, never money. hive estimates USD from a price table ($ per million
tokens: input, output, cached input) by model slug — exact match, else the longest known prefix,
else the default. Override or extend it in the `[codex]` table with the key `hive_prices` (hive
removes it before writing Codex's config.toml):

    [codex.hive_prices]
    "gpt-5.5" = [1.25, 10.0]          # input, output (cached input defaults to input / 10)
    "my-model" = [0.5, 2.0, 0.05]     # input, output, cached input
    default = [1.0, 4.0]              # any other model

Health: `health_check()` spends no tokens: GET `<base_url>/models` of the configured provider
(`model_providers.<model_provider>.base_url` of the `[codex]` table, else OPENAI_BASE_URL, else
https://api.openai.com/v1) with `Authorization: Bearer $<env_key>` (OPENAI_API_KEY for openai);
healthy when it connects and answers a status below 500 that is not 429.

`command` may carry arguments (shlex-split), e.g. `codex_command = "/opt/codex/bin/codex -c x=y"`.
The npm launcher (`bin/codex.js`) works: on Node 20 it stays resident as the parent of the native
binary, and killing the process group ends both. Running the native binary directly
(`node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`) saves a node
process per session.
"""

from hive.backends.codex.backend import CodexBackend

__all__ = ["CodexBackend"]
