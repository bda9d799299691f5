"""What becomes of each successful trace step, decided over the whole run: the
provenance of every input value and of the answer (`analyse`), then which steps the
answer needs (`prune`).

A step is replayed as recorded (`tool`), with references to earlier outputs
(`templated`), or after a small-model step decides one of its values (`llm`). Whether
list picks follow a rule is decided over every consumer at once (`picks.judge_lists`):
the same list may feed a URL and the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from contracts.tasks import TaskSpec
from contracts.traces import TraceStep
from services.compiler.dataflow.answer import answer_provenance
from services.compiler.dataflow.binding import bind
from services.compiler.dataflow.picks import (
    Container,
    ListVerdict,
    apply_verdicts,
    judge_lists,
    list_position,
    needs_pick,
    pick_container,
)
from services.compiler.dataflow.provenance import provenance
from services.compiler.dataflow.sources import Context, Provenance, Source
from services.compiler.recorded import http_error, input_values, int_or_none, non_empty
from services.executor.references import Path
from services.executor.toolkinds import is_content, is_read, value_kind

StepKind = Literal["tool", "templated", "llm"]


@dataclass
class Planned:
    position: int
    step: TraceStep
    values: dict[Path, Provenance] = field(default_factory=dict)
    kind: StepKind = "tool"
    sources: set[int] = field(default_factory=set)


def analyse(
    task: TaskSpec, ok: list[tuple[int, TraceStep]], answer_text: str
) -> tuple[list[Planned], Provenance, dict[Container, ListVerdict]]:
    """The plan of every successful step (`ok`: trace position and step), the answer's
    provenance, and the verdict on every list a value was picked from."""
    plans, answer = _classify(task, ok, answer_text)
    verdicts = _judge_picks(task, ok, plans, answer)
    for plan in plans:
        plan.values = {path: apply_verdicts(v, verdicts) for path, v in plan.values.items()}
        needs_model = any(
            v.kind == "judgement" or needs_pick(v, verdicts) for v in plan.values.values()
        )
        templated = any(v.kind == "template" for v in plan.values.values())
        plan.kind = "llm" if needs_model else "templated" if templated else "tool"
        plan.sources = {s for v in plan.values.values() for s in v.sources}
    answer = apply_verdicts(answer, verdicts)
    if answer.kind == "judgement" and not answer.sources:
        # Written from nowhere: give the small model the last content the run saw, else
        # every output there is (where a navigation or a click landed).
        fallback = _last_read(plans)
        steps = (
            (fallback,)
            if fallback is not None
            else tuple(p.position for p in plans if non_empty(p.step.output))
        )
        answer = Provenance("judgement", answer.why, sources=steps)
    return plans, answer, verdicts


def _classify(
    task: TaskSpec, ok: list[tuple[int, TraceStep]], answer_text: str
) -> tuple[list[Planned], Provenance]:
    """Every input value's provenance and the answer's, in run order: each value is
    looked for in the outputs before it, and what is constant joins the task's context."""
    ctx = Context(task.prompt)
    sources: list[Source] = []
    plans: list[Planned] = []
    last_read: int | None = None  # the last step whose output is content
    for position, step in ok:
        plan = Planned(position, step)
        leaves = input_values(step)
        for path, value in leaves:
            kind = value_kind(step.tool, path)
            plan.values[path] = provenance(value, kind, sources, ctx, context_step=last_read)
        plan.values = bind(plan.values)  # the values of one input say which item each reads
        for path, value in leaves:
            if plan.values[path].kind == "constant" and value_kind(step.tool, path) != "structure":
                ctx.add_constant(value)
        plans.append(plan)
        if step.output is not None:
            sources.append(Source.of(position, step.tool, step.output, reads=is_content(step.tool)))
        if is_content(step.tool) and non_empty(step.output):
            last_read = position
    content = [p.position for p in plans if is_content(p.step.tool) and non_empty(p.step.output)]
    answer = bind({(): answer_provenance(answer_text, sources, ctx, content)})[()]
    return plans, answer


def _judge_picks(
    task: TaskSpec, ok: list[tuple[int, TraceStep]], plans: list[Planned], answer: Provenance
) -> dict[Container, ListVerdict]:
    """The verdict on every list some value (an input or the answer) was picked from."""
    values = [*(v for p in plans for v in p.values.values()), answer]
    uses = [
        pointer
        for prov in values
        if prov.template is not None
        for pointer in prov.template.pointers
    ]
    outputs = {pos: step.output for pos, step in ok}
    limits = {pos: int_or_none(step.input.get("limit")) for pos, step in ok}
    chosen = {
        (pointer.step, listed[0])
        for prov in values
        if prov.choice and prov.template is not None
        for pointer in prov.template.pointers
        if (listed := list_position(pointer.path)) is not None
    }
    return judge_lists(uses, outputs, task.prompt, limits, chosen)


def _last_read(plans: list[Planned]) -> int | None:
    """The last step with content (a read, a command...), else the last such step at all
    (it was the last word)."""
    reads = [p for p in plans if is_content(p.step.tool)]
    with_content = [p for p in reads if non_empty(p.step.output)]
    chosen = with_content or reads
    return chosen[-1].position if chosen else None


def prune(plans: list[Planned], answer: Provenance) -> tuple[list[Planned], set[int]]:
    """Keep every action and the reads something depends on (walking backwards: a step
    only depends on earlier ones). Returns the kept plans and the positions that later
    tool steps (not only the answer) depend on."""
    needed = set(answer.sources)
    needed_by_steps: set[int] = set()
    later_navigation = False
    kept: list[Planned] = []
    for plan in reversed(plans):
        step = plan.step
        keep = plan.position in needed if is_read(step.tool) else True
        if step.tool == "browser_navigate":
            if later_navigation and http_error(step) and plan.position not in needed:
                keep = False
            later_navigation = True
        if keep:
            kept.append(plan)
            needed |= plan.sources
            needed_by_steps |= plan.sources
    kept.reverse()
    return kept, needed_by_steps


def varying(plan: Planned) -> list[str]:
    """The plan's input strings that are not replayed as recorded."""
    return [
        value
        for path, value in input_values(plan.step)
        if path in plan.values and plan.values[path].kind != "constant"
    ]


def used_items(
    kept: list[Planned], answer: Provenance, verdicts: Mapping[Container, ListVerdict]
) -> dict[int, int]:
    """For each output the executor reads list items from, by position: how many items
    its references need (the highest index they read, plus one). A pick's item is
    whichever the small model picks; a last item ([-1]) needs only one."""
    used: dict[int, int] = {}
    for prov in [*(v for p in kept for v in p.values.values()), answer]:
        if prov.template is None:
            continue
        for pointer in prov.template.pointers:
            first = pointer.path[0] if pointer.path else None
            if isinstance(first, int) and first >= 0 and pick_container(pointer, verdicts) is None:
                used[pointer.step] = max(used.get(pointer.step, 0), first + 1)
    return used
