"""The tools service: browser tools (one isolated Playwright context per run) and local
tools (shell, files) behind a deny-by-default policy."""
