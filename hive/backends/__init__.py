"""Agent backends behind one protocol (base.py): claude, codex, scripted."""
