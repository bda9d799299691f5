"""Why a trace is not compiled: rules on the trace itself (`skip_reason`), and on what
its data flow leaves to replay (`skip_plan`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.tasks import OnceTrigger, TaskSpec
from contracts.traces import Trace, TraceStep
from services.compiler.dataflow.sources import Provenance
from services.compiler.plan import Planned
from services.compiler.recorded import non_empty
from services.executor.toolkinds import is_content
from services.kernel.secrets import MASK

MIN_TOOL_STEPS = 2


def skip_reason(task: TaskSpec, trace: Trace) -> str | None:
    """Why this trace is not worth compiling, before looking at its data flow."""
    outside = sorted({s.tool for s in trace.steps if s.status == "ok"} - set(task.allowed_tools))
    if outside:
        # Whoever may publish a trace would otherwise write the task's executor: its
        # replay would be refused the tool (tools service) and fall back on every run.
        return (
            f"the trace uses tools the task does not allow ({', '.join(outside)}); "
            "its replay would be refused them"
        )
    if isinstance(task.trigger, OnceTrigger):
        return "one-time task: it will not run again"
    ok = sum(1 for s in trace.steps if s.status == "ok")
    if ok < MIN_TOOL_STEPS:
        return f"fewer than {MIN_TOOL_STEPS} successful tool steps ({ok})"
    cut = [str(s.index) for s in trace.steps if s.status == "ok" and s.input_truncated]
    if cut:
        # The trace keeps only the head of an oversized input: replayed, that head would
        # be sent (a cut file written), and a small model could not write it out again.
        return f"the trace holds cut inputs (step {', '.join(cut)}); replaying them would send less"
    unread = [str(s.index) for s in trace.steps if s.status == "ok" and _unread_blob(s)]
    if unread:
        # The service could not inline a stored output: the step would look empty, and
        # what came from it would compile as constants or as written from nowhere.
        return (
            f"the output of step {', '.join(unread)} was stored apart and could not be read "
            "back; the data flow cannot be traced without it"
        )
    reads = [s for s in trace.steps if s.status == "ok" and is_content(s.tool)]
    if len(reads) >= 2 and not any(non_empty(s.output) for s in reads):
        # The run looked in several ways and found nothing (a page without the data, or
        # selectors that all missed): whatever it answered, no data flows into it, and
        # its replays would "succeed" on empty reads forever. One empty read is kept: it
        # can be the answer (a status page listing no incidents).
        return (
            f"every read came back empty ({len(reads)} reads): the run found no data"
            " an executor could read again"
        )
    masked = [s.index for s in trace.steps if s.status == "ok" and _holds_mask(s.input)]
    if masked:
        # The run sent the secret; the trace only knows the mask. Replayed as a constant,
        # the mask would be sent instead, fail every time and be recompiled just as broken.
        steps = ", ".join(str(i) for i in masked)
        return (
            f"the trace holds masked secrets (input of step {steps}); "
            "replaying it would send the mask"
        )
    return None


def skip_plan(answer: Provenance, kept: Sequence[Planned]) -> str | None:
    """Why the steps the answer needs (`kept`) make no executor worth replaying."""
    if answer.kind == "judgement" and not answer.sources:
        # A small model asked to write the answer again with no data could only echo it.
        return "the answer needs the small model, but no step's output gives it data"
    if len(kept) < MIN_TOOL_STEPS:
        # The same rule as skip_reason's, on what is left: a run that read nothing it
        # used may have had two steps, but its executor would not.
        return (
            f"fewer than {MIN_TOOL_STEPS} tool steps are needed to produce the answer ({len(kept)})"
        )
    if all(p.kind == "llm" for p in kept):
        return "every step needs the model"
    return None


def _unread_blob(step: TraceStep) -> bool:
    return step.output is None and step.output_ref is not None


def _holds_mask(value: Any) -> bool:
    if isinstance(value, str):
        return MASK in value  # what the tools service writes in place of a secret
    if isinstance(value, Mapping):
        return any(_holds_mask(k) or _holds_mask(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_mask(v) for v in value)
    return False
