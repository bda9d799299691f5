"""The checks a replay makes after each tool step, built at compile time
(`expectations_for`; services/executor/expectations.py runs them): the HTTP status, the
items an extract found, the lines a page read has, an exit code, and a page title only
where one trace can justify it (`title_to_expect`).

An extract on replay must find a share of what the first run found, enough to tell a
page from an empty one or a placeholder ("Loading...", an error stub), not so many that
a page with less content today (an emptier inbox, a shorter list) fails. A title is
expected only of a page reached the same way every time, and only its parts that are
not content the run used (today's headline) nor a state ("All systems operational").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from contracts.executors import ContainsText, ExitCode, Expectation, HttpStatus, MinItems
from contracts.traces import Trace, TraceStep
from services.compiler.plan import StepKind
from services.compiler.recorded import http_status, page_title
from services.executor import references
from services.executor.expectations import text_items
from services.executor.toolkinds import is_read

# An extract on replay must find at least this share of what the first run found, and a
# page read this share of its lines, up to MIN_ITEMS_CAP (or, for an extract, the items
# the executor reads from it).
MIN_ITEMS_FRACTION = 0.5
MIN_ITEMS_CAP = 5
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
    status = http_status(step)
    content = content or Content()
    if step.tool == "browser_navigate":
        if status is not None and 200 <= status < 400:
            expect.append(HttpStatus(status=status))
        title = title_to_expect(page_title(step), content) if kind == "tool" else None
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
        title = title_to_expect(page_title(step), content) if page_fixed else None
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


def structured_items(trace: Trace) -> frozenset[str]:
    """Every string the run's reads found as structured data (extracted items)."""
    return frozenset(
        leaf.strip().casefold()
        for step in trace.steps
        if step.status == "ok" and is_read(step.tool) and isinstance(step.output, list | dict)
        for _, leaf in references.leaves(step.output)
        if leaf.strip()
    )
