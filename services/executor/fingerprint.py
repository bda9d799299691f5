"""What an executor was compiled for: a digest of the parts of a task spec that decide
what a run does. Edit the prompt, the tools or the small model and the old executor no
longer answers the task; edit its schedule or limits and it still does."""

from __future__ import annotations

import hashlib

import msgspec

from contracts.tasks import TaskSpec


def task_fingerprint(spec: TaskSpec) -> str:
    what = [spec.prompt, sorted(spec.allowed_tools), spec.small_model]
    return hashlib.sha256(msgspec.json.encode(what)).hexdigest()[:16]
