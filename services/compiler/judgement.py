"""Small-model steps that decide one tool input again on replay: a *pick* of one item
from today's list (the cheapest product's link), or a *value* written afresh from
today's data (a name read off the page, a date). The tool step then refers to the
small model's answer.

Each prompt gives the task for context only (its URLs elided: one decision, not an
invitation to browse), last time's value as the example, and today's data last.
"""

from __future__ import annotations

import json
import re

from contracts.executors import ContainsText, Expectation, InList, LlmStep
from services.compiler.assembly import Assembly
from services.compiler.dataflow.picks import Container
from services.compiler.dataflow.sources import Provenance
from services.compiler.plan import Planned
from services.executor import references
from services.executor.expectations import shape_of
from services.executor.references import Path, Ref, escape

_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s,]+", re.IGNORECASE)


def task_context(prompt: str) -> str:
    """The task prompt as context for a small-model step, with its URLs elided: the
    step is one decision, not the task, and must not read as an invitation to browse."""
    return escape(_URL.sub("<url>", prompt))


def pick_step(asm: Assembly, container: Container, item_path: Path) -> int:
    """The step that picks the item again (one per field used; a later field is
    asked of the item the first pick named, so every field is of the same item)."""
    key = (container, item_path)
    if key in asm.picks:
        return asm.picks[key]
    position, prefix = container
    verdict = asm.verdicts[container]
    assert verdict.pick is not None
    items = references.lookup(asm.output(position), prefix)
    previous = references.lookup(items[verdict.pick], item_path)
    list_ref = Ref(asm.index_of[position], prefix)
    what = _field_words(item_path)
    first = asm.first_pick.get(container)
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
        f"Task (for context; do not perform it): {task_context(asm.task.prompt)}\n\n"
        f"{ask}\n\n{list_ref.name} ({asm.tool_of[position]}): {list_ref.format()}"
    )
    expect: list[Expectation] = [InList(ref=list_ref.format(), path=list(item_path))]
    if first is None and verdict.named is not None and previous == verdict.named:
        # The item the task names is gone from today's list: fail (and run in full)
        # rather than let the small model answer with another one.
        expect.append(ContainsText(text=verdict.named))
    index = len(asm.steps)
    asm.steps.append(
        LlmStep(
            index=index,
            prompt=prompt,
            variables=[list_ref.name] + ([Ref(first[1]).name] if first else []),
            expect=expect,
        )
    )
    asm.picks[key] = index
    asm.first_pick.setdefault(container, (item_path, index))
    return index


def value_step(asm: Assembly, plan: Planned, path: Path, prov: Provenance) -> int:
    """A step that writes one input value afresh (it was not fixed, and no earlier
    output holds it where a rule can find it)."""
    step = plan.step
    name = references.format_path(path).lstrip(".")
    previous = references.lookup(step.input, path)
    sources = tuple(p for p in sorted(prov.sources or plan.sources) if p in asm.index_of)
    refs = asm.refs(sources)
    prompt = (
        f"Task (for context; do not perform it): {task_context(asm.task.prompt)}\n\n"
        f"One step of this task calls the tool `{step.tool}`. Last time its `{name}` "
        f"was:\n{escape(json.dumps(previous, ensure_ascii=False))}\n"
        f"That value is not fixed ({prov.why}). Decide it again the same way for "
        f"today, and reply with only the new value of `{name}`, without quotes.\n\n"
        f"Today's data:\n{asm.data_block(sources, refs)}"
    )
    index = len(asm.steps)
    asm.steps.append(
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


def _field_words(path: Path) -> str:
    return references.format_path(path).lstrip(".") if path else "text"


def _answer_words(path: Path) -> str:
    return f"its {_field_words(path)}" if path else "the item exactly as written"
