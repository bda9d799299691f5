"""The tracer: turns a successful full LLM run into a trace the compiler can read."""
