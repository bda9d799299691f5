"""The max_failures rule: that many failed runs in a row pause the task, saying why.
A completed run resets the count; resuming the task resets it too."""

from __future__ import annotations


def should_pause(consecutive_failures: int, max_failures: int) -> bool:
    return consecutive_failures >= max_failures


def pause_reason(consecutive_failures: int, max_failures: int, last: str | None) -> str:
    text = f"{consecutive_failures} failed runs in a row (max_failures={max_failures})"
    return f"{text}; last failure: {last}" if last else text
