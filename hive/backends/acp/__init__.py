"""The `acp` backend: any agent that speaks Zed's Agent Client Protocol (JSON-RPC 2.0, one JSON
object per line on stdio), e.g. `claude-agent-acp` (Claude Code) or `codex-acp` (Codex).

Modules: `backend` (AcpBackend: sessions, turns, events), `rpc` (the JSON-RPC client of one agent
process), `translate` (what ACP's messages mean to hive: permissions, usage, tool calls).

One agent process per session (`acp_command`, shlex-split), started in the session's worktree in
its own process group and jail, for the reasons of the codex backend: a session's environment,
crashes, kills and crash recovery stay per session. The session id is the agent's `sessionId`.

    >> initialize {protocolVersion: 1, clientInfo, clientCapabilities: {fs: false, terminal: false}}
    >> session/new {cwd, mcpServers: [], _meta}   or session/load {sessionId, cwd, mcpServers: [], _meta}
                                              (a resume, when the agent says `loadSession`)
    >> session/set_mode {modeId}              the mode that asks before edits and commands
                                              (`acp_mode`, else the first of ASKING_MODES offered)
    >> session/prompt {sessionId, prompt: [text blocks]}   → {stopReason, usage?}   (one turn)
    << session/update  agent_message_chunk | tool_call | tool_call_update | usage_update | ...
    << session/request_permission {toolCall, options}      (answered by hive's policy)
    >> session/cancel {sessionId}                           (abort_session; notification)

Events (the contract of `hive/backends/base.py`):

    busy            a turn's session/prompt is sent (turns sent while one runs are queued here)
    message         {"role": "assistant", "text"} per agent message (chunks joined), one per
                    tool call (`[kind] title`, "tool": kind); {"role": "tool", "text"} when a
                    tool call completes or fails
    permission      PermissionRequest: `tool` is the policy's name for the ACP kind (edit/delete/
                    move → Write, execute → Bash, read/search/think → Read/Grep, fetch →
                    WebFetch; any other kind stays `acp:<kind>`, which the policy refuses),
                    `paths` its locations and the paths of its raw input, `command` its shell
                    line. The answer is the agent's `allow_once` (else `allow_always`) or
                    `reject_once` (else `reject_always`) option; `cancelled` when none fits.
    usage           session totals: a prompt answer's `usage` (tokens of the turn) is added;
                    a `usage_update`'s `cost` (cumulative, USD) is the process's cost. An agent
                    that reports only its context size (`usage_update.used`) is counted that
                    many input tokens per turn: a floor, not its bill.
    provider_error  a failed prompt whose error names a provider failure (5xx, 429, overload)
    idle            at the prompt's answer: end_turn → ok; cancelled → not ok ("aborted" when
                    hive asked); max_tokens / max_turn_requests / refusal → not ok
    exited          when the process ends; the open turn and the queued ones get idle first

`abort_session` answers the open permission requests `cancelled`, sends `session/cancel` and waits
`interrupt_grace` for the prompt's answer, then kills the group. `delete_session` closes stdin,
waits `kill_grace` and kills the group; no event follows. A session whose process ended is
`exited`; `create_session(resume=<id>)` starts a new process and loads the session.

Files and terminals: hive offers neither (`fs.readTextFile`/`writeTextFile` and `terminal` are
false), so the agent reads, writes and runs commands itself, inside its jail. Serving them would
make hive, outside the jail, the agent's hands: the jail confines an agent better than any check of
the paths it names. Requests for them are answered "method not found".

Hive's instructions (`SessionSpec.system_prompt`) go as the first text block of the session's
first prompt: ACP has no system prompt. The role's model is chosen (`session/set_model`) when the
agent offers a model of that id.

The jail: the agent's install (its npm tree) read-only; the state folders of the agents the ACP
adapters drive writable (`$CLAUDE_CONFIG_DIR` or `~/.claude` and `~/.claude.json`, `$CODEX_HOME`
or `~/.codex`); the endpoints `acp_endpoints` (else `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL` when
set, else Anthropic's and OpenAI's APIs); the environment names `acp_env`.
"""

from hive.backends.acp.backend import AcpBackend

__all__ = ["AcpBackend"]
