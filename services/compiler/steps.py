"""Tool steps: each kept trace step replayed with its recorded input, the values that
came from earlier outputs written as references (a pick's item through its small-model
step, a value written afresh through its own), and the checks a replay makes after it.
An extract that later steps pick from is followed by a condition step: empty today, the
replay aborts rather than pick from nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contracts.executors import ConditionStep, ToolStep
from services.compiler.assembly import Assembly
from services.compiler.dataflow.picks import pick_container
from services.compiler.dataflow.sources import Pointer, Template
from services.compiler.judgement import pick_step, value_step
from services.compiler.plan import Planned
from services.compiler.recorded import non_empty
from services.compiler.step_checks import Content, expectations_for
from services.executor.references import Path, Ref, escape
from services.executor.toolkinds import navigates


def tool_step(asm: Assembly, plan: Planned, content: Content) -> None:
    """Add the step replaying `plan` (and the small-model steps its values need);
    `content` is what later steps and the answer use, which a title must not be."""
    step = plan.step
    asm.tool_of[plan.position] = step.tool
    values: dict[Path, str] = {}
    for path, prov in plan.values.items():
        if prov.kind == "template" and prov.template is not None:
            values[path] = render(asm, prov.template)
        elif prov.kind == "judgement":
            values[path] = Ref(value_step(asm, plan, path, prov)).format()
    if step.tool == "browser_navigate":
        asm.page_fixed = not values
    elif values and navigates(step.tool):
        asm.page_fixed = False
    index = len(asm.steps)
    asm.index_of[plan.position] = index
    asm.steps.append(
        ToolStep(
            index=index,
            tool=step.tool,
            input=_rebuild(step.input, values),
            templated=bool(values),
            expect=expectations_for(
                step,
                "tool" if not values else "templated",
                page_fixed=asm.page_fixed,
                content=content,
                used_items=asm.used_items.get(plan.position, 0),
            ),
            trace_step=step.index,
            fingerprint=step.metadata.fingerprint,
            target=step.metadata.target,
            sample=sample(step.tool, step.output),
        )
    )
    if (
        step.tool == "browser_extract"
        and plan.position in asm.needed_by_steps
        and non_empty(step.output)
    ):
        asm.steps.append(
            ConditionStep(
                index=len(asm.steps),
                ref=Ref(index).format(),
                check="not_empty",
                on_false="fail",
                message=f"step {index} extracted nothing; the page may have changed",
            )
        )


# What a step keeps of the values it read, for healing it (services/executor/healing.py).
SAMPLE_ITEMS = 3
SAMPLE_CHARS = 80


def sample(tool: str, output: Any) -> list[Any]:
    """The first few items an extract read, their texts cut short: what a heal compares
    the page's candidates with. Nothing for any other tool."""
    if tool != "browser_extract" or not isinstance(output, list):
        return []

    def cut(value: Any) -> Any:
        return value[:SAMPLE_CHARS] if isinstance(value, str) else value

    return [
        {k: cut(v) for k, v in item.items()} if isinstance(item, dict) else cut(item)
        for item in output[:SAMPLE_ITEMS]
    ]


def render(asm: Assembly, template: Template) -> str:
    """The template as the executor writes it: literal text escaped, each pointer a
    reference to the step replaying its output (or to the pick step for its item)."""
    out = []
    for n, part in enumerate(template.parts):
        if isinstance(part, str):
            following = template.parts[n + 1 : n + 2]
            before_reference = bool(following) and isinstance(following[0], Pointer)
            out.append(escape(part, before_reference=before_reference))
            continue
        picked = pick_container(part, asm.verdicts)
        if picked is None:
            out.append(Ref(asm.index_of[part.step], part.path, part.encoding).format())
        else:
            out.append(Ref(pick_step(asm, *picked), (), part.encoding).format())
    return "".join(out)


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
