"""The daemon and what runs inside it: workers, shared mode, recovery, degraded mode, watchers."""
