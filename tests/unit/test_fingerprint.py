"""An executor records what its task asked; an edit that changes what a run does
changes that record, an edit of the schedule or limits does not."""

from __future__ import annotations

from pathlib import Path

import msgspec

from contracts.executors import Executor
from contracts.tasks import IntervalTrigger, TaskSpec
from contracts.traces import Trace
from services.compiler.compile import compile
from services.executor.fingerprint import task_fingerprint

TRACE = Path(__file__).parent.parent / "data" / "traces" / "news_top3.json"


def test_an_executor_records_the_task_it_was_compiled_for() -> None:
    trace = msgspec.json.decode(TRACE.read_bytes(), type=Trace)
    executor = compile(trace.task, trace)
    assert isinstance(executor, Executor)
    assert executor.task_fingerprint == task_fingerprint(trace.task)


def test_what_a_run_does_changes_the_fingerprint_and_nothing_else_does() -> None:
    spec = TaskSpec(name="news", prompt="Open http://x/news and report the top 3 headlines")
    same = task_fingerprint(spec)
    edits = {
        "prompt": msgspec.structs.replace(spec, prompt=spec.prompt.replace("3", "5")),
        "tools": msgspec.structs.replace(spec, allowed_tools=["browser_navigate"]),
        "small model": msgspec.structs.replace(spec, small_model="sonnet"),
    }
    for what, edited in edits.items():
        assert task_fingerprint(edited) != same, what
    kept = msgspec.structs.replace(
        spec,
        name="renamed",
        trigger=IntervalTrigger(every_s=60),
        max_iterations=5,
        deadline_s=60,
        allowed_tools=list(reversed(spec.allowed_tools)),  # the same tools
    )
    assert task_fingerprint(kept) == same
