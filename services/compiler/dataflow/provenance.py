"""Where one value came from: a constant, a template over earlier outputs, or a
judgement the small model makes again (`provenance`).

The checks run from the cheapest certainty to the vaguest: how a tool is driven (a
selector) and what the run repeats are constants; a value the prompt names is fixed
unless the prompt offers it as one option the page decides between (`choices`); then an
earlier output holding it exactly, then one holding strings found inside it
(`templates`, `urls`), unless page content leaks into the text around them (`leaks`);
what is left is constant only when the task's own words make it.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.compiler.dataflow import urlparts
from services.compiler.dataflow.choices import choice, reads_holding
from services.compiler.dataflow.leaks import leaked_content, taken_from_text
from services.compiler.dataflow.sources import Context, Provenance, Source
from services.compiler.dataflow.templates import find_exact, find_template
from services.compiler.dataflow.text import named, tokens
from services.compiler.dataflow.urls import resolved_link, url_template
from services.executor import references
from services.executor.toolkinds import Kind


def provenance(
    value: str,
    kind: Kind,
    sources: Sequence[Source],
    ctx: Context,
    *,
    context_step: int | None = None,
) -> Provenance:
    """Classify one string input value (or the answer, as kind "data").
    `context_step` is the read the small model would look at when the value came from
    nowhere. A template may be open (text several list items hold): `bind` the values of
    one input (or the answer) together before use."""
    if kind == "structure":
        return Provenance("constant", "how, not what")
    if not value.strip():
        return Provenance("constant", "blank")
    if value in ctx.constants:
        return Provenance("constant", "repeats an earlier constant input")
    decided: str | None = None
    if named(ctx.prompt, value):
        # Named by the prompt is fixed, unless the prompt names it as one option the
        # page decides between: then the data flow below finds where it came from.
        decided = choice(value, kind, sources, ctx, context_step)
        if decided is None:
            return Provenance("constant", "from the task prompt")
    exact = find_exact(value, sources, ctx)
    if exact is not None:
        step = exact.pointers[0].step
        return Provenance(
            "template",
            f"the output of step {step}",
            exact,
            (step,),
            choice=decided is not None,
        )
    found = _built_from_outputs(value, kind, sources, ctx, decided)
    if found is not None:
        return found
    if decided is not None:
        holding = reads_holding(value, sources)
        steps = holding or ((context_step,) if context_step is not None else ())
        return Provenance("judgement", decided, sources=steps)
    if kind != "data":
        taken = taken_from_text(value, sources, ctx)
        if taken is not None:
            token, steps = taken
            why = f"{token!r} is taken from the text of step {steps[-1]}"
            return Provenance("judgement", why, sources=steps)
        return Provenance("constant", "not found in any earlier output")
    return _data_from_nowhere(value, sources, ctx, context_step)


def _built_from_outputs(
    value: str, kind: Kind, sources: Sequence[Source], ctx: Context, decided: str | None
) -> Provenance | None:
    """A value made of earlier output strings and literal text around them: a template,
    unless page content leaks into that text; a link a read found, resolved against the
    page, is a judgement. None when no output string is in it (or the page decided it)."""
    template = find_template(value, sources, ctx, kind)
    if kind == "url" or (kind == "generic" and urlparts.looks_like_url(value)):
        template = url_template(value, sources, ctx, template)
    if kind in ("url", "local", "generic"):
        link = resolved_link(value, sources, ctx, template)
        if link is not None:
            return Provenance(
                "judgement",
                f"the link {references.format_path(link.path)} found by step {link.step}",
                sources=(link.step,),
            )
    if template is None or decided is not None:
        return None
    steps = tuple(sorted({p.step for p in template.pointers}))
    if kind == "data":
        leak = leaked_content(template, sources, ctx)
        if leak is not None:
            why, leak_steps = leak
            return Provenance("judgement", why, sources=tuple(sorted({*steps, *leak_steps})))
    return Provenance("template", "built from earlier outputs", template, steps)


def _data_from_nowhere(
    value: str, sources: Sequence[Source], ctx: Context, context_step: int | None
) -> Provenance:
    """A data value no output holds: constant when made of the task's words, else a
    judgement over the outputs that hold it inside a longer text, or the reads that have
    its words, or else the read the small model would look at (`context_step`)."""
    words = tokens(value) - ctx.allowed_tokens
    if not words:
        return Provenance("constant", "made of the task prompt's words")
    if len(value) >= 3:
        containing = tuple(s.step for s in sources if any(value in leaf for _, leaf in s.leaves))
        if containing:
            return Provenance(
                "judgement", f"taken from the text of step {containing[-1]}", sources=containing
            )
    overlapping = tuple(s.step for s in sources if s.reads and words & s.tokens)
    if overlapping:
        return Provenance(
            "judgement",
            f"derived from the content of step {overlapping[-1]}",
            sources=overlapping,
        )
    steps = (context_step,) if context_step is not None else ()
    return Provenance(
        "judgement", "appears in no earlier output nor in the task prompt", sources=steps
    )
