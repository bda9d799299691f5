"""The runner: one run at a time per worker slot. Path A replays the task's executor;
when that breaks (or there is none) path B runs the full LLM agent loop."""
