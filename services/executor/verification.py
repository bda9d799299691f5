"""Checking a replayed answer against the page as it reads now: which replays are
checked, the prompt the small model gets, and how its verdict is read.

A replay can run cleanly and still be wrong: the page kept the selectors an executor
reads but changed what they mean (a column moved, a unit or currency changed, a stale
copy). The drift fingerprints (drift.py) notice most such changes; a check asks the small
model whether the page, as the replay saw it, supports the answer. Checked are every
replay the fingerprints flag, the first replays of each new version, every replay of a
candidate (a version the compiler has not yet seen verified), and a sample of the rest
(`verify_rate`, by run id so a redelivery decides the same way). The verdict is read
like a quality check's (quality.parse_verdict): PASS or FAIL, then why.

The second tier, for read-only executors (services/runner/shadow.py), compares the
replay's answer with a shadow full run's: when they differ in form the small model is
asked whether they say the same thing (`comparison_prompt`, read by `read_comparison`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from contracts.tools import Fingerprint
from services.executor.quality import Verdict, parse_verdict

# The first replays of every version are checked: a new version is the one most likely
# to be wrong (it was compiled from a page that may itself have drifted).
FIRST_REPLAYS_CHECKED = 2
DEFAULT_VERIFY_RATE = 0.03
PROMPT_HEAD = "Verification of a replayed answer."
COMPARISON_HEAD = "Comparison of two answers to one task."
# Bounds on what one read adds to the prompt: the small model's reading is paid for.
MAX_ITEMS_CHARS = 6000
MAX_TEXT_CHARS = 8000

Why = Literal["flagged", "new_version", "sampled", "healed"]


def sampled(run_id: str, rate: float) -> bool:
    """Whether the run falls in the sample: the same answer for the same run id."""
    if rate <= 0:
        return False
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def budget_short(left_usd: float | None, full_run_usd: float) -> str | None:
    """Why verification that is only sampled is left out of a run: the day's budget had
    less left than a full run costs (what a shadow costs, and what a wrong answer's
    fallback would). None: it may be spent. Checks the risk calls for (a flag, a new
    version, a candidate) are made whatever is left: they cost a small-model call."""
    if left_usd is None or left_usd >= full_run_usd:
        return None
    return (
        f"daily budget nearly spent: ${left_usd:.4f} was left when the run went out,"
        f" a full run costs ${full_run_usd:.4f}"
    )


def why_check(
    flagged: bool,
    version_replays: int,
    run_id: str,
    rate: float,
    *,
    candidate: bool = False,
    healed: bool = False,
) -> Why | None:
    """Why this replay's answer is checked, or None: it is delivered unchecked. A
    `candidate` is on trial whatever its count (one restored after the version compiled
    to replace it failed may be seasoned): a verified check is what promotes it. A
    replay with a step `healed` in place answered through steps nobody recorded."""
    if flagged:
        return "flagged"
    if healed:
        return "healed"
    if candidate or version_replays < FIRST_REPLAYS_CHECKED:
        return "new_version"
    if sampled(run_id, rate):
        return "sampled"
    return None


@dataclass(frozen=True)
class Read:
    """One read the replay made: a browser_extract (its items and the fingerprint of the
    page as it is now) or a page's text (browser_read_page, or any read whose output is
    text)."""

    step: int
    tool: str
    output: Any
    url: str | None = None
    selector: str | None = None
    fingerprint: Fingerprint | None = None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def _read_block(read: Read) -> str:
    attrs = f'step="{read.step}" tool="{read.tool}"'
    if read.url:
        attrs += f' url="{read.url}"'
    if read.selector:
        attrs += f" selector={json.dumps(read.selector, ensure_ascii=False)}"
    found = read.fingerprint
    if found is not None and found.lang:
        attrs += f' lang="{found.lang}"'
    lines = [f"<read {attrs}>"]
    if isinstance(read.output, str):
        lines += ["<text>", _cut(read.output, MAX_TEXT_CHARS), "</text>"]
    else:
        if found is not None:
            if found.notes:
                lines += ["<notes>", *found.notes, "</notes>"]
            if found.headers:
                lines.append(f"<headers>{' | '.join(found.headers)}</headers>")
            if found.labels:
                labels = json.dumps(found.labels, ensure_ascii=False)
                lines.append(f"<labels>{labels}</labels>")
        items = json.dumps(read.output, ensure_ascii=False)
        lines += ["<items>", _cut(items, MAX_ITEMS_CHARS), "</items>"]
    lines.append("</read>")
    return "\n".join(lines)


def verification_prompt(task: str, answer: str, reads: list[Read], changes: list[str]) -> str:
    """What the small model is asked. `changes`: what the fingerprints found different
    from the recording (told, so a reader looks there first; empty for a sampled check).
    Each read gives the page's notes, its headers, the label of each value read (per
    field: the `fields` name, or "" for the matched element itself; one label per item,
    in the items' order) and the items, as the replay read them now."""
    changed = "\n".join(f"- {change}" for change in changes) or "- none noticed"
    blocks = "\n".join(_read_block(read) for read in reads) or "<read>nothing</read>"
    return (
        f"{PROMPT_HEAD} A scheduled task was answered again by replaying recorded steps, "
        "without the large model. Check the answer against what the page shows now: does "
        "the page support this answer to this task? The values must mean what the answer "
        "says they mean: the right row, column or label (the labels below are the page's "
        "own, now), the unit, currency and scale, the date order and time zone, the order "
        "of a list, entries a note excludes, and a page that is current.\n"
        f"Task: {task}\n"
        f"<answer>\n{answer}\n</answer>\n"
        f"<changes>\n{changed}\n</changes>\n"
        f"{blocks}\n"
        "Reply with PASS or FAIL, then a colon and one short sentence saying why."
    )


def read_verdict(text: str, answer: str) -> Verdict:
    """The check's verdict; anything but a clear PASS fails (quality.parse_verdict)."""
    return parse_verdict(text, content=answer)


def comparison_prompt(task: str, replayed: str, full: str) -> str:
    """What the small model is asked when a shadow full run answered otherwise in form."""
    return (
        f"{COMPARISON_HEAD} A scheduled task was answered twice from the same pages: once "
        "by replaying recorded steps, once by a full run that read the pages itself. Do "
        "the two answers say the same thing: the same entries, values, units, currency, "
        "dates and order? Wording and layout do not matter.\n"
        f"Task: {task}\n"
        f"<replayed_answer>\n{replayed}\n</replayed_answer>\n"
        f"<full_answer>\n{full}\n</full_answer>\n"
        "Reply with SAME or DIFFERENT, then a colon and one short sentence saying why."
    )


# As quality._VERDICT, with the comparison's words: "**SAME**: ...", "Verdict - DIFFERENT".
_MARKUP = r"[\s*_`#>\"']*"
_COMPARED = re.compile(
    rf"^{_MARKUP}(?:verdict{_MARKUP}[:\-\u2013\u2014]?{_MARKUP})?(SAME|DIFFERENT)\b"
    r"[\s*_`\"'.!]*[:\-\u2013\u2014]?\s*(.*)$",
    re.I | re.S,
)
_SHOUTED = re.compile(r"\b(SAME|DIFFERENT)\b")


def read_comparison(text: str, answers: str) -> Verdict:
    """The comparison's verdict (ok: SAME). Anything unclear is DIFFERENT, as a check's
    unclear verdict fails: nothing vouched for the replay. `answers`: the two answers;
    a verdict word they hold themselves is content, not a second verdict."""
    said = text.strip()
    found = _COMPARED.match(said)
    if found is None:
        return Verdict(False, f"unreadable comparison: {said[:120]!r}")
    word = found.group(1).upper()
    reason = found.group(2).strip()
    quoted = {match.group(1) for match in _SHOUTED.finditer(answers)}
    if any(other.group(1) not in (word, *quoted) for other in _SHOUTED.finditer(reason)):
        return Verdict(False, f"contradictory comparison: {said[:120]!r}")
    return Verdict(word == "SAME", reason or word.lower())
