"""Agent backends behind one protocol.

    base.py           the protocol (Backend), its events and records
    registry.py       backend names → classes: load_backend, backend_for_role
    sessions.py       SessionBackend: event bus, session table, run_turn, delete/stop (shared)
    agent_process.py  AgentProcess: one CLI process in its own group, JSON lines, kill (shared)
    processes.py      process groups: signal, liveness, pidfd reaping
    reports.py        token counts and costs from agents' reports
    claude.py         Claude Code (stream-json on stdio)
    codex/            Codex (`codex app-server`, JSON-RPC on stdio), a package of one-job modules
    scripted.py       scripted agents (scripted_agent.py) for tests and `git hive demo`
"""
