"""The run's answer: a data value with one more rule, that once the run read content
(a page, a file, a command's output) an answer made of the prompt's words may still be
the run's verdict on it ("No service is down."), and is then a judgement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from services.compiler.dataflow.prompt import asks_verdict
from services.compiler.dataflow.provenance import provenance
from services.compiler.dataflow.sources import Context, Provenance, Source
from services.compiler.dataflow.text import words

# Words that state a verdict: the polarity and the state of what was checked.
_VERDICT_WORDS = frozenset(
    {
        *("yes", "no", "not", "none", "nothing", "nobody", "never", "neither", "nor"),
        *("isn", "aren", "wasn", "weren", "doesn", "don", "didn", "hasn", "haven", "cannot"),
        *("ok", "okay", "fine", "good", "bad", "all", "any", "every", "some", "still"),
        *("up", "down", "open", "closed", "above", "below", "over", "under", "within"),
        *("true", "false", "pass", "passed", "passing", "fail", "failed", "failing"),
        *("operational", "available", "unavailable", "online", "offline", "running"),
        *("stopped", "healthy", "unhealthy", "degraded", "outage", "outages", "normal"),
        *("alert", "warning", "error", "errors", "problem", "problems", "issue", "issues"),
    }
)

_WEEKDAYS = frozenset(
    {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)


def answer_provenance(
    value: str, sources: Sequence[Source], ctx: Context, content: Sequence[int]
) -> Provenance:
    """Classify the run's answer: a data value (`provenance`), except that once the run
    read content (`content`: the positions of steps whose output is content), an answer
    that looks fixed may be the run's verdict on it. "No service is down." is made of the
    prompt's words ("alert me if any service is down"), yet the page decided it: replayed
    as recorded, every replay would say all is well. So, with content read, an answer is
    constant only when the task asks for no verdict (a condition, a check, a question)
    and every word of it, the short ones too ("no", "up", "ok"), is the task's; a
    template whose own text states a verdict ("Nothing is down: {{...}}") is written
    again; and a verdict is written again from everything the run read (a check of two
    pages is about both)."""
    context_step = content[-1] if content else None
    prov = provenance(value, "data", sources, ctx, context_step=context_step)
    if not content:
        return prov  # nothing read: a fixed confirmation stays fixed
    asked = asks_verdict(ctx.prompt)
    if prov.kind == "constant" and value.strip():
        extra = sorted(words(value) - ctx.allowed_words)
        if asked is not None:
            why = f"a verdict on what the run read (the task asks {asked!r})"
        elif extra:
            why = f"the run's own words ({extra[0]!r}) on what it read"
        else:
            return prov
        return Provenance("judgement", why, sources=tuple(content))
    if prov.kind == "template" and prov.template is not None:
        # "Monday, {{date}}: ...": the weekday the run wrote itself is tomorrow's wrong.
        dated = sorted((words(prov.template.literal) & _WEEKDAYS) - ctx.allowed_words)
        if dated:
            why = f"its text names a weekday ({dated[0]!r}) that changes with the date"
            return Provenance("judgement", why, sources=tuple(sorted({*prov.sources, *content})))
    if asked is None:
        return prov
    if prov.kind == "template" and prov.template is not None:
        said = sorted(words(prov.template.literal) & _VERDICT_WORDS)
        if not said:
            return prov
        why = f"its text states a verdict ({said[0]!r}) on what the run read"
        return Provenance("judgement", why, sources=tuple(sorted({*prov.sources, *content})))
    if prov.kind == "judgement":
        return replace(prov, sources=tuple(sorted({*prov.sources, *content})))
    return prov
