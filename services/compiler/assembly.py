"""The executor as it is assembled, step by step: what every module that adds a step
reads and writes (which executor step replays each trace step, the picks made so far,
whether the page is still reached the same way every time)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.executors import ExecutorStep
from contracts.tasks import TaskSpec
from contracts.traces import Trace
from services.compiler.dataflow.picks import Container, ListVerdict
from services.executor.references import Path, Ref


@dataclass
class Assembly:
    task: TaskSpec
    trace: Trace
    verdicts: Mapping[Container, ListVerdict]
    needed_by_steps: set[int]  # trace positions later tool steps depend on
    items: frozenset[str] = frozenset()  # what the reads found as structured data
    used_items: dict[int, int] = field(default_factory=dict)  # by position: items read
    steps: list[ExecutorStep] = field(default_factory=list)
    index_of: dict[int, int] = field(default_factory=dict)  # trace position -> step index
    tool_of: dict[int, str] = field(default_factory=dict)
    picks: dict[tuple[Container, Path], int] = field(default_factory=dict)  # -> pick step
    first_pick: dict[Container, tuple[Path, int]] = field(default_factory=dict)
    # False once a step went somewhere that depends on the data (a picked link).
    page_fixed: bool = True

    def output(self, position: int) -> Any:
        """What the trace step at `position` recorded as its output."""
        return self.trace.steps[position].output

    def refs(self, positions: set[int] | tuple[int, ...]) -> list[Ref]:
        """A reference to the output of each executor step replaying these positions."""
        return [Ref(self.index_of[p]) for p in sorted(positions)]

    def data_block(self, positions: set[int] | tuple[int, ...], refs: list[Ref]) -> str:
        """The fresh data a small-model step reads, last in its prompt: one line per
        step with a reference filled in on replay."""
        lines = [
            f"{ref.name} ({self.tool_of[pos]}): {ref.format()}"
            for pos, ref in zip(sorted(positions), refs, strict=True)
        ]
        return "\n".join(lines) if lines else "(none)"
