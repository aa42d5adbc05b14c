"""What the orchestrator, the merge step and the Queen share about agents: their ids, the
permission policy, the prompts and the worker file protocol."""
