"""compile(task, trace) -> Executor | Skip: a successful full run's tool calls become a
replayable script. Pure and deterministic: the same task and trace always give the same
executor (its compiled_at is the trace's captured_at).

What becomes of each successful trace step (where its values came from is the data
flow, dataflow/; the plan over the whole run is plan.py):
  tool       replayed as recorded;
  templated  an input value came from an earlier output: it becomes a reference;
  llm        an input needs judgement over content that changes between runs: a small
             model step decides that one value again (judgement.py: a *pick* of one item
             from a list, e.g. the cheapest product's link, or a *value* written afresh),
             and the tool step refers to its answer;
  dropped    a failed call, a read whose result nothing used (a probe: an extract that
             found nothing before one that did, a page read before choosing a
             selector), or a navigation that answered an HTTP error before another.
Then: expectations the replay checks (step_checks.py), a condition step after an
extract that later steps pick from (steps.py), and a result step producing the answer
in the original run's form (result.py). Traces not worth compiling, and plans that
leave nothing worth replaying, are skipped (skip.py); a small-model answer with no data
to write it from is not compiled.
"""

from __future__ import annotations

from contracts.executors import Executor, ExecutorStep, Skip
from contracts.tasks import TaskSpec
from contracts.traces import Trace
from services.compiler.assembly import Assembly
from services.compiler.dataflow.picks import Container, ListVerdict
from services.compiler.dataflow.sources import Provenance
from services.compiler.plan import Planned, analyse, prune, used_items, varying
from services.compiler.result import result_step
from services.compiler.skip import skip_plan, skip_reason
from services.compiler.stats import stats
from services.compiler.step_checks import Content, structured_items
from services.compiler.steps import tool_step
from services.executor.fingerprint import task_fingerprint
from services.kernel.pricing import PriceTable


def compile(
    task: TaskSpec,
    trace: Trace,
    *,
    version: int = 0,
    prices: PriceTable | None = None,
) -> Executor | Skip:
    """Compile a successful full run. `version` is assigned by the Executor aggregate;
    `prices` (default: the built-in table) prices the small-model steps."""
    reason = skip_reason(task, trace)
    if reason is not None:
        return Skip(reason=reason)
    ok = [(pos, step) for pos, step in enumerate(trace.steps) if step.status == "ok"]
    plans, answer, verdicts = analyse(task, ok, trace.answer)
    kept, needed_by_steps = prune(plans, answer)
    reason = skip_plan(answer, kept)
    if reason is not None:
        return Skip(reason=reason)
    steps = _assemble(task, trace, verdicts, needed_by_steps, kept, answer)
    return Executor(
        task_id=trace.task_id,
        version=version,
        source_run_id=trace.run_id,
        compiled_at=trace.captured_at,
        small_model=task.small_model,
        steps=steps,
        stats=stats(steps, trace, task, prices),
        task_fingerprint=task_fingerprint(task),
    )


def _assemble(
    task: TaskSpec,
    trace: Trace,
    verdicts: dict[Container, ListVerdict],
    needed_by_steps: set[int],
    kept: list[Planned],
    answer: Provenance,
) -> list[ExecutorStep]:
    """The executor's steps: a tool step (and the small-model steps it needs) for every
    kept plan, in run order, then the result step."""
    asm = Assembly(
        task,
        trace,
        verdicts,
        needed_by_steps,
        items=structured_items(trace),
        used_items=used_items(kept, answer, verdicts),
    )
    for n, plan in enumerate(kept):
        later = [trace.answer, *(v for p in kept[n + 1 :] for v in varying(p))]
        tool_step(asm, plan, Content(tuple(later), asm.items))
    asm.steps.append(result_step(asm, answer))
    return asm.steps
