"""Shared git work below the orchestrator and the merge step: worker worktrees and their branch
names, replaying commits onto the target, moving the target by compare-and-swap."""
