"""The result step: the answer in the original run's form. A template when the answer
is a plain function of the data read (picks included), the recorded text when the task
fixes it (never a verdict on what the run read: `dataflow.answer`), else the small model
given today's data (what the run read, a command's output included) and the original
answer as the example of the form.
"""

from __future__ import annotations

from contracts.executors import ResultStep
from services.compiler.assembly import Assembly
from services.compiler.dataflow.sources import Provenance
from services.compiler.judgement import task_context
from services.compiler.recorded import non_empty
from services.compiler.steps import render
from services.executor import references
from services.executor.references import escape


def result_step(asm: Assembly, answer: Provenance) -> ResultStep:
    original = asm.trace.answer
    if answer.kind == "template" and answer.template is not None:
        template = render(asm, answer.template)
        return ResultStep(
            index=len(asm.steps),
            mode="template",
            template=template,
            variables=sorted({r.name for r in references.find(template)}),
            example=original,
        )
    if answer.kind == "constant":
        return ResultStep(
            index=len(asm.steps), mode="template", template=escape(original), example=original
        )
    sources = tuple(p for p in sorted(answer.sources) if p in asm.index_of)
    if not sources:
        # Never an answer from no data: every kept step's output is better than none.
        sources = tuple(p for p in sorted(asm.index_of) if non_empty(asm.output(p)))
    refs = asm.refs(sources)
    prompt = (
        f"Task (for context): {task_context(asm.task.prompt)}\n\n"
        "Answer the task again from today's data, in exactly the same form as this "
        "earlier answer (same structure, wording and formatting; only the data may "
        f"differ):\n<example>\n{escape(original)}\n</example>\n"
        "Reply with only the answer.\n\n"
        f"Today's data:\n{asm.data_block(sources, refs)}"
    )
    return ResultStep(
        index=len(asm.steps),
        mode="llm",
        prompt=prompt,
        variables=[r.name for r in refs],
        example=original,
    )
