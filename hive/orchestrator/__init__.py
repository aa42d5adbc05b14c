"""The daemon: watcher-driven loop, worker lifecycle, escalation, notes."""
