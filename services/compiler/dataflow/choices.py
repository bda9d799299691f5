"""Values the prompt names as one option among others: the page decided which.

A value the prompt names is fixed ("search for red shoes"), unless the prompt offers it
as one of several: joined by "or" to another ("Widget or Gizmo, whichever has stock"), a
branch of a condition with an else ("yes if ..., otherwise no"), or one of a listed few
a judgement word chooses from ("of Widget, Gadget and Gizmo, the cheapest"). Then what
the run read decided it, and a replay must decide again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from services.compiler.dataflow.prompt import PROMPT_URL, judgement_word
from services.compiler.dataflow.sources import Context, Source
from services.compiler.dataflow.text import mentions
from services.executor.toolkinds import Kind

# A sentence ends at . ; ! ? followed by a space (not inside a URL) or at a line break.
_SENTENCE = re.compile(r"(?:[^.;!?\n]|[.;!?](?=\S))+")
_CONDITION = re.compile(r"\b(?:if|when|whenever|unless|whether)\b", re.IGNORECASE)
_OTHERWISE = re.compile(r"\b(?:otherwise|else|if not)\b", re.IGNORECASE)
# A branch is the value right beside its condition: "yes if ...", "otherwise no",
# "else report ALERT" (at most two words between), not a search term further off.
_BRANCH_BEFORE = re.compile(r"^\W*(?:\w+\W+){0,2}?(?:if|when|whenever|unless)\b", re.I)
_BRANCH_AFTER = re.compile(r"\b(?:otherwise|else|if not)\W+(?:\w+\W+){0,2}$", re.I)
_WORD = r"[\w$\u00a3\u20ac%.+-]+"
_OPTION_AFTER = re.compile(
    rf"^(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)"
    rf"[\"'\u2018\u201c]?(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})",
    re.IGNORECASE,
)
_OPTION_BEFORE = re.compile(
    rf"(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})[\"'\u2019\u201d]?"
    rf"(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Alternatives:
    """How the prompt offers `value` as one option among others, in one sentence."""

    either: tuple[str, ...] = ()  # options joined to it by "or" / "/": a choice by itself
    listed: tuple[str, ...] = ()  # options joined by commas or "and": a choice only
    #                               when a judgement word governs the list ("the cheapest")
    conditional: bool = False  # "yes if ..., otherwise no": a verdict between branches
    judgement: str | None = None  # a judgement word in the same sentence


def _phrases(words: str, *, from_end: bool) -> list[str]:
    """The 1-, 2- and 3-word phrases next to a separator: "cost of Gadget" may be the
    option "Gadget"."""
    parts = words.split()
    picks = [parts[-n:] if from_end else parts[:n] for n in range(1, len(parts) + 1)]
    return [" ".join(p).strip(".\"'") for p in picks]


def alternatives(value: str, prompt: str) -> Alternatives:
    """Every sentence of the prompt that names `value` (as whole words): the options
    written next to it, and whether a condition with an other branch or a judgement word
    governs it."""
    needle = re.compile(rf"(?<!\w){re.escape(value.strip())}(?!\w)", re.IGNORECASE)
    either: list[str] = []
    listed: list[str] = []
    conditional = False
    judgement: str | None = None
    for sentence in _SENTENCE.findall(PROMPT_URL.sub("<url>", prompt)):
        spans = [m.span() for m in needle.finditer(sentence)]
        if not spans:
            continue
        branches = _CONDITION.search(sentence) and _OTHERWISE.search(sentence)
        judgement = judgement or judgement_word(sentence)
        for start, end in spans:
            if branches and (
                _BRANCH_BEFORE.match(sentence[end:]) or _BRANCH_AFTER.search(sentence[:start])
            ):
                conditional = True
            after = _OPTION_AFTER.match(sentence[end:].lstrip("\"'\u2019\u201d"))
            before = _OPTION_BEFORE.search(sentence[:start].rstrip("\"'\u2018\u201c"))
            for match, from_end in ((after, False), (before, True)):
                if match is None:
                    continue
                joined = "or" in match["sep"].lower() or "/" in match["sep"]
                options = _phrases(match["words"], from_end=from_end)
                (either if joined else listed).extend(options)
    return Alternatives(tuple(either), tuple(listed), conditional, judgement)


def reads_holding(value: str, sources: Sequence[Source]) -> tuple[int, ...]:
    """The reads whose content names `value` (whole words, any case)."""
    return tuple(
        s.step for s in sources if s.reads and any(mentions(leaf, value) for _, leaf in s.leaves)
    )


def choice(
    value: str, kind: Kind, sources: Sequence[Source], ctx: Context, context_step: int | None
) -> str | None:
    """Why a value the prompt names is a decision the page made, or None when it is a
    fixed value of the task. The prompt must offer it as one option among others: joined
    by "or" to another, a branch of a condition with an else ("yes if ..., otherwise
    no"), or one of a listed few a judgement word chooses from ("of Widget, Gadget and
    Gizmo, the cheapest"). And the run must have read something to decide from: a typed
    or answered verdict ("no", "ALERT") needs only an earlier read; a label to click is
    chosen among what the page showed, so the page must show it and a listed rival too.
    """
    if kind not in ("label", "data"):
        return None  # a URL or a command the prompt writes stays as written
    alts = alternatives(value, ctx.prompt)
    holding = reads_holding(value, sources)
    if kind == "label" and not holding:
        return None
    if kind == "data" and not holding and context_step is None:
        return None

    def shown(option: str) -> bool:
        return (
            bool(option)
            and option.casefold() != value.casefold()
            and (kind == "data" or bool(reads_holding(option, sources)))
        )

    if alts.conditional:
        return "one branch of a condition the task sets, decided by the page"
    if any(shown(o) for o in alts.either):
        return "one of the alternatives the task names, decided by the page"
    listed_rivals = [o for o in alts.listed if o.casefold() != value.casefold()]
    if (
        alts.judgement is not None
        and holding
        and any(reads_holding(o, sources) for o in listed_rivals)
    ):
        return f"the {alts.judgement!r} of the options the task names, decided by the page"
    return None
