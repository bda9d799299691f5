"""compile(task, trace) -> Executor | Skip: a successful full run's tool calls become a
replayable script. Pure and deterministic: the same task and trace always give the same
executor (its compiled_at is the trace's captured_at).

What becomes of each successful trace step (the data flow is in dataflow.py):
  tool       replayed as recorded;
  templated  an input value came from an earlier output: it becomes a reference;
  llm        an input needs judgement over content that changes between runs: a small
             model step decides that one value again (a *pick* of one item from a list,
             e.g. the cheapest product's link, or a *value* written afresh), and the
             tool step refers to its answer;
  dropped    a failed call, a read whose result nothing used (a probe: an extract that
             found nothing before one that did, a page read before choosing a
             selector), or a navigation that answered an HTTP error before another.
Then: expectations the replay checks (items extracted, lines a page read has, HTTP
status, and a page title only where one trace can justify it: a page reached the same
way every time, and only the parts of its title that are not content the run used, such
as today's headline), a condition step after an extract that later steps pick from
(abort when it is empty), and a result step producing the answer in the original run's
form: a template when the answer is a plain function of the extracted data (picks
included), a constant only when the task fixes it (never a verdict on what the run read,
dataflow.answer_provenance), else the small model given the fresh data (what the run
read, a command's output included) and the original answer as the example of the form.
A small-model answer with no data to write it from is not compiled.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from contracts.executors import (
    ConditionStep,
    ContainsText,
    Executor,
    ExecutorStats,
    ExecutorStep,
    ExitCode,
    Expectation,
    HttpStatus,
    InList,
    LlmStep,
    MinItems,
    ResultStep,
    Skip,
    ToolStep,
)
from contracts.tasks import OnceTrigger, TaskSpec
from contracts.traces import Trace, TraceStep
from services.compiler.dataflow import (
    Container,
    Context,
    ListVerdict,
    Pointer,
    Provenance,
    Source,
    Template,
    answer_provenance,
    apply_verdicts,
    bind,
    judge_lists,
    list_position,
    provenance,
)
from services.executor import references
from services.executor.cost import estimate_call
from services.executor.expectations import shape_of, text_items
from services.executor.fingerprint import task_fingerprint
from services.executor.quality import quality_prompt
from services.executor.references import Path, Ref, escape
from services.executor.toolkinds import is_content, is_read, navigates, value_kind
from services.kernel.pricing import PriceTable

# An extract on replay must find at least this share of what the first run found, and a
# page read this share of its lines, up to MIN_ITEMS_CAP (or, for an extract, the items
# the executor reads from it): enough to tell a page from an empty one or a placeholder
# ("Loading...", an error stub), not so many that a page with less content today (an
# emptier inbox, a shorter list) fails.
MIN_ITEMS_FRACTION = 0.5
MIN_ITEMS_CAP = 5
MIN_TOOL_STEPS = 2
# About the size of a quality check's reply ("PASS: " and one short sentence).
QUALITY_VERDICT = "PASS: the new answer has the same form and kind of content."

StepKind = Literal["tool", "templated", "llm"]

_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s,]+", re.IGNORECASE)
# What the tools service writes in place of a secret in the tool events a trace is built
# from: services/kernel/secrets.py MASK (the literal here keeps this core free of the
# kernel).
SECRET_MASK = "[redacted]"


@dataclass
class _Planned:
    position: int
    step: TraceStep
    values: dict[Path, Provenance] = field(default_factory=dict)
    kind: StepKind = "tool"
    sources: set[int] = field(default_factory=set)


def skip_reason(task: TaskSpec, trace: Trace) -> str | None:
    """Why this trace is not worth compiling, before looking at its data flow."""
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
    if len(reads) >= 2 and not any(_non_empty(s.output) for s in reads):
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


def _unread_blob(step: TraceStep) -> bool:
    return step.output is None and step.output_ref is not None


def _holds_mask(value: Any) -> bool:
    if isinstance(value, str):
        return SECRET_MASK in value
    if isinstance(value, Mapping):
        return any(_holds_mask(k) or _holds_mask(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_mask(v) for v in value)
    return False


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
    plans, answer, verdicts = _analyse(task, ok, trace.answer)
    if answer.kind == "judgement" and not answer.sources:
        # A small model asked to write the answer again with no data could only echo it.
        return Skip(reason="the answer needs the small model, but no step's output gives it data")
    kept, needed_by_steps = _prune(plans, answer)
    if len(kept) < MIN_TOOL_STEPS:
        # The same rule as skip_reason's, on what is left: a run that read nothing it
        # used may have had two steps, but its executor would not.
        return Skip(
            reason=f"fewer than {MIN_TOOL_STEPS} tool steps are needed to produce the answer "
            f"({len(kept)})"
        )
    if all(p.kind == "llm" for p in kept):
        return Skip(reason="every step needs the model")
    steps = _Assembler(task, trace, verdicts, needed_by_steps).run(kept, answer)
    return Executor(
        task_id=trace.task_id,
        version=version,
        source_run_id=trace.run_id,
        compiled_at=trace.captured_at,
        small_model=task.small_model,
        steps=steps,
        stats=_stats(steps, trace, task, prices),
        task_fingerprint=task_fingerprint(task),
    )


# --- analysis ---------------------------------------------------------------------------


def _analyse(
    task: TaskSpec, ok: list[tuple[int, TraceStep]], answer_text: str
) -> tuple[list[_Planned], Provenance, dict[Container, ListVerdict]]:
    ctx = Context(task.prompt)
    sources: list[Source] = []
    plans: list[_Planned] = []
    last_read: int | None = None  # the last step whose output is content
    for position, step in ok:
        plan = _Planned(position, step)
        leaves = _input_values(step)
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
        if is_content(step.tool) and _non_empty(step.output):
            last_read = position
    content = [p.position for p in plans if is_content(p.step.tool) and _non_empty(p.step.output)]
    answer = bind({(): answer_provenance(answer_text, sources, ctx, content)})[()]

    # Whether list picks follow a rule is decided over every consumer at once.
    uses = [
        pointer
        for prov in [*(v for p in plans for v in p.values.values()), answer]
        if prov.template is not None
        for pointer in prov.template.pointers
    ]
    outputs = {pos: step.output for pos, step in ok}
    limits = {pos: _int_or_none(step.input.get("limit")) for pos, step in ok}
    chosen = {
        (pointer.step, position[0])
        for prov in [*(v for p in plans for v in p.values.values()), answer]
        if prov.choice and prov.template is not None
        for pointer in prov.template.pointers
        if (position := list_position(pointer.path)) is not None
    }
    verdicts = judge_lists(uses, outputs, task.prompt, limits, chosen)
    for plan in plans:
        plan.values = {path: apply_verdicts(v, verdicts) for path, v in plan.values.items()}
        needs_model = any(
            v.kind == "judgement" or _picks(v, verdicts) for v in plan.values.values()
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
            else tuple(p.position for p in plans if _non_empty(p.step.output))
        )
        answer = Provenance("judgement", answer.why, sources=steps)
    return plans, answer, verdicts


def _picks(prov: Provenance, verdicts: Mapping[Container, ListVerdict]) -> bool:
    """Does this templated value use an item only a small-model pick can find?"""
    if prov.template is None:
        return False
    return any(_pick_container(p, verdicts) is not None for p in prov.template.pointers)


def _pick_container(
    pointer: Pointer, verdicts: Mapping[Container, ListVerdict]
) -> tuple[Container, Path] | None:
    """(the list, the path inside the item) when `pointer` goes through a picked item."""
    position = list_position(pointer.path)
    if position is None:
        return None
    prefix, _ = position
    verdict = verdicts.get((pointer.step, prefix))
    if verdict is None or verdict.ok or verdict.pick is None:
        return None
    return (pointer.step, prefix), pointer.path[len(prefix) + 1 :]


def _last_read(plans: list[_Planned]) -> int | None:
    """The last step with content (a read, a command...), else the last such step at all
    (it was the last word)."""
    reads = [p for p in plans if is_content(p.step.tool)]
    with_content = [p for p in reads if _non_empty(p.step.output)]
    chosen = with_content or reads
    return chosen[-1].position if chosen else None


def _prune(plans: list[_Planned], answer: Provenance) -> tuple[list[_Planned], set[int]]:
    """Keep every action and the reads something depends on (walking backwards: a step
    only depends on earlier ones). Returns the kept plans and the positions that later
    tool steps (not only the answer) depend on."""
    needed = set(answer.sources)
    needed_by_steps: set[int] = set()
    later_navigation = False
    kept: list[_Planned] = []
    for plan in reversed(plans):
        step = plan.step
        keep = plan.position in needed if is_read(step.tool) else True
        if step.tool == "browser_navigate":
            if later_navigation and _http_error(step) and plan.position not in needed:
                keep = False
            later_navigation = True
        if keep:
            kept.append(plan)
            needed |= plan.sources
            needed_by_steps |= plan.sources
    kept.reverse()
    return kept, needed_by_steps


# --- assembly ---------------------------------------------------------------------------


def task_context(prompt: str) -> str:
    """The task prompt as context for a small-model step, with its URLs elided: the
    step is one decision, not the task, and must not read as an invitation to browse."""
    return escape(_URL.sub("<url>", prompt))


class _Assembler:
    def __init__(
        self,
        task: TaskSpec,
        trace: Trace,
        verdicts: Mapping[Container, ListVerdict],
        needed_by_steps: set[int],
    ) -> None:
        self.task = task
        self.trace = trace
        self.verdicts = verdicts
        self.needed_by_steps = needed_by_steps
        self.steps: list[ExecutorStep] = []
        self.index_of: dict[int, int] = {}  # trace position -> executor step index
        self.tool_of: dict[int, str] = {}
        self.picks: dict[tuple[Container, Path], int] = {}  # -> index of the pick step
        self.first_pick: dict[Container, tuple[Path, int]] = {}
        # False once a step went somewhere that depends on the data (a picked link).
        self.page_fixed = True
        self.items = _structured_items(trace)
        self.used_items: dict[int, int] = {}

    def run(self, kept: list[_Planned], answer: Provenance) -> list[ExecutorStep]:
        self.used_items = _used_items(kept, answer, self.verdicts)
        for n, plan in enumerate(kept):
            later = [self.trace.answer, *(v for p in kept[n + 1 :] for v in _varying(p))]
            self._tool_step(plan, Content(tuple(later), self.items))
        self.steps.append(self._result(answer))
        return self.steps

    # -- tool steps --

    def _tool_step(self, plan: _Planned, content: Content) -> None:
        step = plan.step
        self.tool_of[plan.position] = step.tool
        values: dict[Path, str] = {}
        for path, prov in plan.values.items():
            if prov.kind == "template" and prov.template is not None:
                values[path] = self._template(prov.template)
            elif prov.kind == "judgement":
                values[path] = Ref(self._value_step(plan, path, prov)).format()
        if step.tool == "browser_navigate":
            self.page_fixed = not values
        elif values and navigates(step.tool):
            self.page_fixed = False
        index = len(self.steps)
        self.index_of[plan.position] = index
        self.steps.append(
            ToolStep(
                index=index,
                tool=step.tool,
                input=_rebuild(step.input, values),
                templated=bool(values),
                expect=expectations_for(
                    step,
                    "tool" if not values else "templated",
                    page_fixed=self.page_fixed,
                    content=content,
                    used_items=self.used_items.get(plan.position, 0),
                ),
                trace_step=step.index,
            )
        )
        if (
            step.tool == "browser_extract"
            and plan.position in self.needed_by_steps
            and _non_empty(step.output)
        ):
            self.steps.append(
                ConditionStep(
                    index=len(self.steps),
                    ref=Ref(index).format(),
                    check="not_empty",
                    on_false="fail",
                    message=f"step {index} extracted nothing; the page may have changed",
                )
            )

    def _template(self, template: Template) -> str:
        out = []
        for n, part in enumerate(template.parts):
            if isinstance(part, str):
                following = template.parts[n + 1 : n + 2]
                before_reference = bool(following) and isinstance(following[0], Pointer)
                out.append(escape(part, before_reference=before_reference))
                continue
            picked = _pick_container(part, self.verdicts)
            if picked is None:
                out.append(Ref(self.index_of[part.step], part.path, part.encoding).format())
            else:
                out.append(Ref(self._pick_step(*picked), (), part.encoding).format())
        return "".join(out)

    # -- small-model steps --

    def _data_block(self, positions: set[int] | tuple[int, ...], refs: list[Ref]) -> str:
        """The fresh data a small-model step reads, last in its prompt: one line per
        step with a reference filled in on replay."""
        lines = [
            f"{ref.name} ({self.tool_of[pos]}): {ref.format()}"
            for pos, ref in zip(sorted(positions), refs, strict=True)
        ]
        return "\n".join(lines) if lines else "(none)"

    def _refs(self, positions: set[int] | tuple[int, ...]) -> list[Ref]:
        return [Ref(self.index_of[p]) for p in sorted(positions)]

    def _pick_step(self, container: Container, item_path: Path) -> int:
        """The step that picks the item again (one per field used; a later field is
        asked of the item the first pick named, so every field is of the same item)."""
        key = (container, item_path)
        if key in self.picks:
            return self.picks[key]
        position, prefix = container
        verdict = self.verdicts[container]
        assert verdict.pick is not None
        items = references.lookup(self._output(position), prefix)
        previous = references.lookup(items[verdict.pick], item_path)
        list_ref = Ref(self.index_of[position], prefix)
        what = _field_words(item_path)
        first = self.first_pick.get(container)
        if first is None:
            ask = (
                f"The task needs one item from the list below. Last time it chose item "
                f"{verdict.pick + 1} of {verdict.size}, whose {what} was "
                f"{escape(json.dumps(previous, ensure_ascii=False))} ({verdict.why}). "
                f"Choose again the same way from today's list, and answer with "
                f"{_answer_words(item_path)} only."
            )
        else:
            first_path, first_index = first
            ask = (
                f"The task chose one item from the list below: the one whose "
                f"{_field_words(first_path)} is {Ref(first_index).format()}. Answer with "
                f"{_answer_words(item_path)} only."
            )
        prompt = (
            f"Task (for context; do not perform it): {task_context(self.task.prompt)}\n\n"
            f"{ask}\n\n{list_ref.name} ({self.tool_of[position]}): {list_ref.format()}"
        )
        expect: list[Expectation] = [InList(ref=list_ref.format(), path=list(item_path))]
        if first is None and verdict.named is not None and previous == verdict.named:
            # The item the task names is gone from today's list: fail (and run in full)
            # rather than let the small model answer with another one.
            expect.append(ContainsText(text=verdict.named))
        index = len(self.steps)
        self.steps.append(
            LlmStep(
                index=index,
                prompt=prompt,
                variables=[list_ref.name] + ([Ref(first[1]).name] if first else []),
                expect=expect,
            )
        )
        self.picks[key] = index
        self.first_pick.setdefault(container, (item_path, index))
        return index

    def _value_step(self, plan: _Planned, path: Path, prov: Provenance) -> int:
        """A step that writes one input value afresh (it was not fixed, and no earlier
        output holds it where a rule can find it)."""
        step = plan.step
        name = references.format_path(path).lstrip(".")
        previous = references.lookup(step.input, path)
        sources = tuple(p for p in sorted(prov.sources or plan.sources) if p in self.index_of)
        refs = self._refs(sources)
        prompt = (
            f"Task (for context; do not perform it): {task_context(self.task.prompt)}\n\n"
            f"One step of this task calls the tool `{step.tool}`. Last time its `{name}` "
            f"was:\n{escape(json.dumps(previous, ensure_ascii=False))}\n"
            f"That value is not fixed ({prov.why}). Decide it again the same way for "
            f"today, and reply with only the new value of `{name}`, without quotes.\n\n"
            f"Today's data:\n{self._data_block(sources, refs)}"
        )
        index = len(self.steps)
        self.steps.append(
            LlmStep(
                index=index,
                prompt=prompt,
                variables=[r.name for r in refs],
                # Shaped like last time's value: an explanation in its place fails the
                # replay instead of going into the tool.
                expect=[shape_of(previous)],
                trace_step=step.index,
            )
        )
        return index

    def _result(self, answer: Provenance) -> ResultStep:
        original = self.trace.answer
        if answer.kind == "template" and answer.template is not None:
            template = self._template(answer.template)
            return ResultStep(
                index=len(self.steps),
                mode="template",
                template=template,
                variables=sorted({r.name for r in references.find(template)}),
                example=original,
            )
        if answer.kind == "constant":
            return ResultStep(
                index=len(self.steps), mode="template", template=escape(original), example=original
            )
        sources = tuple(p for p in sorted(answer.sources) if p in self.index_of)
        if not sources:
            # Never an answer from no data: every kept step's output is better than none.
            sources = tuple(p for p in sorted(self.index_of) if _non_empty(self._output(p)))
        refs = self._refs(sources)
        prompt = (
            f"Task (for context): {task_context(self.task.prompt)}\n\n"
            "Answer the task again from today's data, in exactly the same form as this "
            "earlier answer (same structure, wording and formatting; only the data may "
            f"differ):\n<example>\n{escape(original)}\n</example>\n"
            "Reply with only the answer.\n\n"
            f"Today's data:\n{self._data_block(sources, refs)}"
        )
        return ResultStep(
            index=len(self.steps),
            mode="llm",
            prompt=prompt,
            variables=[r.name for r in refs],
            example=original,
        )

    def _output(self, position: int) -> Any:
        return self.trace.steps[position].output


def _field_words(path: Path) -> str:
    return references.format_path(path).lstrip(".") if path else "text"


def _answer_words(path: Path) -> str:
    return f"its {_field_words(path)}" if path else "the item exactly as written"


def _varying(plan: _Planned) -> list[str]:
    """The plan's input strings that are not replayed as recorded."""
    return [
        value
        for path, value in _input_values(plan.step)
        if path in plan.values and plan.values[path].kind != "constant"
    ]


def _used_items(
    kept: list[_Planned], answer: Provenance, verdicts: Mapping[Container, ListVerdict]
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
            if isinstance(first, int) and first >= 0 and _pick_container(pointer, verdicts) is None:
                used[pointer.step] = max(used.get(pointer.step, 0), first + 1)
    return used


def _structured_items(trace: Trace) -> frozenset[str]:
    """Every string the run's reads found as structured data (extracted items)."""
    return frozenset(
        leaf.strip().casefold()
        for step in trace.steps
        if step.status == "ok" and is_read(step.tool) and isinstance(step.output, list | dict)
        for _, leaf in references.leaves(step.output)
        if leaf.strip()
    )


def _input_values(step: TraceStep) -> list[tuple[Path, str]]:
    """The input values the data flow classifies: every string, and every number typed
    as data (a form takes 1.0834 as well as "1.0834", and it came from the page just as
    surely), as its JSON text."""
    values = list(references.leaves(step.input))

    def numbers(value: Any, path: Path) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                numbers(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                numbers(item, (*path, i))
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and value_kind(step.tool, path) == "data"
        ):
            values.append((path, json.dumps(value)))

    numbers(step.input, ())
    return values


def _rebuild(value: Any, replaced: Mapping[Path, str], path: Path = ()) -> Any:
    """The recorded input with some values replaced by templates; the other strings
    escaped, so nothing recorded is ever read as a reference."""
    if path in replaced:
        return replaced[path]
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {k: _rebuild(v, replaced, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuild(v, replaced, (*path, i)) for i, v in enumerate(value)]
    return value


# --- expectations -----------------------------------------------------------------------


def _status(step: TraceStep) -> int | None:
    status = step.metadata.http_status
    if status is None and isinstance(step.output, dict):
        raw = step.output.get("status")
        status = raw if isinstance(raw, int) else None
    return status


def _title(step: TraceStep) -> str:
    title = step.metadata.title
    if not title and isinstance(step.output, dict):
        raw = step.output.get("title")
        title = raw if isinstance(raw, str) else None
    return (title or "").strip()


# Where a title splits into parts: "Headline | Site", "Site - Section", "Site: Section".
_TITLE_PARTS = re.compile(r"\s+[|\u2013\u2014\u00b7-]\s+|\s*[|\u00b7]\s*|:\s+")


@dataclass(frozen=True)
class Content:
    """What the run used as data, where a page title that is content gives itself away:
    the answer and later steps' non-constant inputs (`texts`), and the values reads
    found as structured data (`items`, casefolded)."""

    texts: tuple[str, ...] = ()
    items: frozenset[str] = frozenset()

    def holds(self, text: str) -> bool:
        folded = text.casefold()
        if folded in self.items:
            return True
        word = re.compile(rf"(?<!\w){re.escape(folded)}(?!\w)")
        return any(word.search(t.casefold()) for t in self.texts)


# Words that date a text: "Canteen menu for Monday" reads "... for Tuesday" tomorrow.
_DATED = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|june|july|august|september|october|november|december|"
    r"today|tonight|tomorrow|yesterday|weekend)\b",
    re.IGNORECASE,
)
# Their short forms are words too ("You may also like", "Sun Valley"): one dates a text
# only written as one, capitalised, where a date stands: at the end, before a number,
# a date's punctuation or another day ("Menu for Wed", "Sat & Sun", "Mon-Fri", "May 3").
_SHORT_DATE = (
    r"(?:Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun|"
    r"Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)"
)
_SHORT_DATED = re.compile(
    rf"\b(?:{_SHORT_DATE}|{_SHORT_DATE.upper()})\b\.?"
    rf"(?=\s*(?:$|\d|[,;:/&|)\u2013\u2014-]|(?:to|and|through)\s+{_SHORT_DATE}\b))"
)
# A title part that introduces today's story: the part after it is the story ("Top
# story: Markets rally | Daily Planet").
_HEADLINE_LABEL = re.compile(
    r"(?:top|lead|main|cover|today's)\s+stor(?:y|ies)|breaking(?:\s+news)?|headlines?|"
    r"just in|developing",
    re.IGNORECASE,
)
# Plainer labels name a section as often ("Latest | Acme Blog", "Featured - Acme"): they
# introduce a story only before a colon ("Update: Storm hits coast").
_SECTION_LABEL = re.compile(r"(?:latest|live)(?:\s+news)?|featured|now|updates?", re.IGNORECASE)


def _stable_text(text: str) -> bool:
    """Text with digits (dates, counts, prices), or naming a day or a month, changes from
    run to run."""
    return (
        0 < len(text) <= 120
        and not any(ch.isdigit() for ch in text)
        and _DATED.search(text) is None
        and _SHORT_DATED.search(text) is None
    )


# Words that state how something is right now: a title made of them is the page's
# verdict ("All systems operational", "Sold out"), the very thing a monitoring task
# reads, and it changes the day the state does. "Service status" names the page; it
# stays.
_STATE = re.compile(
    r"\b(?:operational|outages?|down|degraded|incidents?|maintenance|disruptions?|"
    r"(?:un)?healthy|failing|failures?|failed|offline|online|(?:un)?available|"
    r"(?:in|out of) stock|sold out|delayed|cancell?ed|suspended|resolved|investigating|"
    r"all systems|all clear|(?:no|known) issues|up and running|errors?|closed|open now|"
    # the weather is a state too ("Weather in Paris: Sunny")
    r"sunny|cloudy|overcast|rain|rainy|showers|snow|snowy|snowing|storms?|stormy|fog|"
    r"foggy|windy|drizzle|thunder\w*|hail|sleet)\b",
    re.IGNORECASE,
)


def _states(text: str) -> bool:
    return _STATE.search(text) is not None


def title_to_expect(title: str, content: Content) -> str | None:
    """The text of a page title a replay can expect, or None. One trace cannot show
    which parts change, so a part is trusted only when it has no digits, does not state
    a condition ("All systems operational": `_STATE`) and is not content the run used
    (a headline in the answer, a name a later step typed, an extracted item): the whole
    title when every part is trusted, else its longest trusted part (the site's name
    beside today's headline). A part after a headline's label ("Top story: ...", or
    "Update: ..." where a plainer label goes on after a colon) is the headline."""
    parts: list[tuple[str, str]] = []  # each part, and the separator after it
    cursor = 0
    for separator in [*_TITLE_PARTS.finditer(title), None]:
        end = separator.start() if separator else len(title)
        if title[cursor:end].strip():
            parts.append((title[cursor:end].strip(), separator.group() if separator else ""))
        cursor = separator.end() if separator else end
    trusted: list[str] = []
    after_label = False
    for part, after in parts:
        if not after_label and _stable_text(part) and not _states(part) and not content.holds(part):
            trusted.append(part)
        after_label = _HEADLINE_LABEL.fullmatch(part) is not None or (
            _SECTION_LABEL.fullmatch(part) is not None and after.strip() == ":"
        )
    if not trusted:
        return None
    if len(trusted) == len(parts) and _stable_text(title):
        return title
    best = max(trusted, key=len)
    return best if len(best) >= 3 and any(ch.isalpha() for ch in best) else None


def expectations_for(
    step: TraceStep,
    kind: StepKind,
    *,
    page_fixed: bool = True,
    content: Content | None = None,
    used_items: int = 0,
) -> list[Expectation]:
    """What the replay checks after this step. A title is expected only of a page the
    run reaches the same way every time: not through a reference (`kind`), nor after an
    earlier step went somewhere that depends on the data (`page_fixed` false: the detail
    page of today's pick), and only its parts that are not content (`title_to_expect`).
    `used_items`: how many items of this step's list output later steps read."""
    expect: list[Expectation] = []
    status = _status(step)
    content = content or Content()
    if step.tool == "browser_navigate":
        if status is not None and 200 <= status < 400:
            expect.append(HttpStatus(status=status))
        title = title_to_expect(_title(step), content) if kind == "tool" else None
        if title is not None:
            expect.append(ContainsText(text=title))
    elif step.tool == "browser_extract":
        if isinstance(step.output, list) and step.output:
            share = math.floor(len(step.output) * MIN_ITEMS_FRACTION)
            count = max(1, min(share, max(MIN_ITEMS_CAP, used_items)))
            expect.append(MinItems(count=count))
    elif step.tool == "browser_read_page":
        # The page must have text: an empty page or a placeholder would pass for it, and
        # a small model would answer from nothing ("no service is down").
        lines = text_items(step.output) if isinstance(step.output, str) else 0
        if lines:
            count = max(1, min(MIN_ITEMS_CAP, math.floor(lines * MIN_ITEMS_FRACTION)))
            expect.append(MinItems(count=count))
        title = title_to_expect(_title(step), content) if page_fixed else None
        if isinstance(step.output, str) and title is not None and title in step.output:
            expect.append(ContainsText(text=title))
    elif step.tool in ("browser_click", "browser_type", "browser_fill_form"):
        code = step.metadata.http_status
        if code is not None and 200 <= code < 400:
            expect.append(HttpStatus(status=code))
    elif step.tool == "shell_exec":
        exit_code = step.metadata.exit_code
        if exit_code is None and isinstance(step.output, dict):
            exit_code = step.output.get("exit_code")
        if exit_code == 0:
            expect.append(ExitCode(code=0))
    return expect


# --- stats ------------------------------------------------------------------------------


def _stats(
    steps: list[ExecutorStep], trace: Trace, task: TaskSpec, prices: PriceTable | None
) -> ExecutorStats:
    """Counts, and the small model's cost estimated on the recorded data (it stands in
    for the fresh data when sizing prompts; a pick or value answers like last time)."""
    by_trace = {step.index: step for step in trace.steps}
    outputs: dict[int, Any] = {}
    deterministic = templated = llm = 0
    cost = 0.0
    for step in steps:
        match step:
            case ToolStep():
                recorded = by_trace.get(step.trace_step) if step.trace_step is not None else None
                outputs[step.index] = recorded.output if recorded is not None else None
                if step.templated:
                    templated += 1
                else:
                    deterministic += 1
            case ConditionStep():
                deterministic += 1
            case LlmStep():
                llm += 1
                reply = _expected_reply(step, outputs)
                outputs[step.index] = reply
                cost += _estimate(step.prompt, reply, outputs, task, prices)
            case ResultStep(mode="llm"):
                llm += 1
                cost += _estimate(step.prompt or "", trace.answer, outputs, task, prices)
            case ResultStep():
                if step.variables:
                    templated += 1
                else:
                    deterministic += 1
    if task.quality_check:
        # Every replay also has the small model judge its answer against the original.
        prompt = quality_prompt(task.prompt, trace.answer, trace.answer)
        cost += estimate_call(prompt, QUALITY_VERDICT, task.small_model, prices)[1]
    return ExecutorStats(
        total_steps=len(steps),
        deterministic_steps=deterministic,
        templated_steps=templated,
        llm_steps=llm,
        estimated_replay_cost_usd=round(cost, 9),
        source_run_cost_usd=trace.cost_usd,
    )


def _expected_reply(step: LlmStep, outputs: Mapping[int, Any]) -> str:
    """What the small model would answer on the recorded data (for sizing only)."""
    for expectation in step.expect:
        if isinstance(expectation, InList):
            try:
                items = references.render_string(expectation.ref, outputs)
                if isinstance(items, list) and items:
                    return references.stringify(
                        references.lookup(items[0], tuple(expectation.path))
                    )
            except (references.BadReference, KeyError, IndexError, TypeError):
                break
    return " " * 40


def _estimate(
    prompt: str,
    expected: str,
    outputs: Mapping[int, Any],
    task: TaskSpec,
    prices: PriceTable | None,
) -> float:
    try:
        rendered = references.render_string(prompt, outputs)
    except references.BadReference:
        rendered = prompt
    text = rendered if isinstance(rendered, str) else references.stringify(rendered)
    return estimate_call(text, expected, task.small_model, prices)[1]


# --- small helpers ----------------------------------------------------------------------


def _non_empty(output: Any) -> bool:
    return output not in (None, "", [], {})


def _http_error(step: TraceStep) -> bool:
    status = _status(step)
    return status is not None and status >= 400


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
