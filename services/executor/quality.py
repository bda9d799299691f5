"""The optional quality check of a replayed answer (TaskSpec.quality_check): the
prompt the replay sends the small model, and how its verdict is read.

A replay can succeed step by step and still answer badly: a page that keeps its
selectors but now shows placeholders, a list that now holds something else. With the
check on, the small model compares the replay's answer with the answer of the full run
the executor was compiled from — for form and kind, not content, which is expected to
change — and a failing verdict counts as a broken replay, so the run falls back to a
full run and the task heals like after any other break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str


def quality_prompt(task_prompt: str, earlier: str, answer: str) -> str:
    return (
        "Quality check of a replayed answer. A scheduled task was answered again by a "
        "replay, without the large model. Judge whether the new answer still does the "
        "task: the same form and kind of content as the earlier, verified answer, with "
        "real values (its content is expected to differ: the data changed).\n"
        f"Task: {task_prompt}\n"
        f"<earlier_answer>\n{earlier}\n</earlier_answer>\n"
        f"<new_answer>\n{answer}\n</new_answer>\n"
        "Reply with PASS or FAIL, then a colon and one short sentence saying why."
    )


# Markup small models dress a verdict in: "**PASS**", "## FAIL", "`PASS`".
_MARKUP = r"[\s*_`#>\"']*"
# The verdict word first, after an optional "Verdict" label ("**Verdict:**", a "## Verdict"
# heading, "Verdict -"): "PASS: …", "PASSED - …", "Pass." Then the reason, past the
# punctuation that leads to it.
_VERDICT = re.compile(
    rf"^{_MARKUP}(?:verdict{_MARKUP}[:\-\u2013\u2014]?{_MARKUP})?(PASS|FAIL)(?:ED)?\b"
    r"[\s*_`\"'.!]*[:\-\u2013\u2014]?\s*(.*)$",
    re.I | re.S,
)
# A verdict word in capitals later on: "PASS: …, so FAIL" says both.
_SHOUTED = re.compile(r"\b(PASS|FAIL)(?:ED)?\b")


def parse_verdict(text: str, *, content: str = "") -> Verdict:
    """PASS/FAIL first; anything else cannot vouch for the answer, so it fails. So does
    a reply that goes on to give the other verdict: it vouches for nothing either.
    `content`: the answers compared; a verdict word they hold themselves (an ops check
    reports "db: FAIL") is the content the reason describes, not a second verdict."""
    said = text.strip()
    found = _VERDICT.match(said)
    if found is None:
        return Verdict(False, f"unreadable verdict: {said[:120]!r}")
    word = found.group(1).upper()
    reason = found.group(2).strip()
    quoted = {match.group(1) for match in _SHOUTED.finditer(content)}
    if any(other.group(1) not in (word, *quoted) for other in _SHOUTED.finditer(reason)):
        return Verdict(False, f"contradictory verdict: {said[:120]!r}")
    return Verdict(word == "PASS", reason or word.lower())
