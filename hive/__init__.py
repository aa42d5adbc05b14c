"""git-hive: many LLM coding agents on one codebase, with the work queue stored in git."""

__version__ = "0.1.0"
