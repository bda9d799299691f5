"""A replayed answer compared with what a careful reading of the page gives (verifying.py),
robustly about form and strictly about meaning; and the simple rule for tasks the
stand-in does not read carefully.

Form: whitespace and case do not matter, nor a final full stop, nor how a number is
written ("3.0 kg" is "3 kg", "$19.90" is "19.90 USD", "1,500 thousand" is "1,500,000").
Meaning: the same entry, the same number in the same unit, currency and scale, the same
date (an ISO date, or a slashed one read month-first as the tasks are set up), the same
clock time in the same zone, the same list in the same order, and a stale page said to be
stale. A value converted to another unit, currency or zone fails as well: the careful
reading states the page's own, and a replay copies values, it never converts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from services.dev.standin.careful import CarefulTask, Extreme, Lookup, Property, Ranked, clean_key
from services.dev.standin.meaning import Quantity
from services.dev.standin.reading import collapse

SIMPLE_PASS = "PASS: nothing on the page contradicts the answer."
_STALE = re.compile(r"\bstale\b", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_SLASHED = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_AMOUNT = re.compile(
    r"(?P<sign>[$€£])?\s*(?P<n>-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
    r"(?:\s*(?P<scale>thousand|million)s?)?(?:\s*(?P<unit>[^\d\s].*))?",
    re.IGNORECASE,
)
_SIGNS = {"$": "USD", "€": "EUR", "£": "GBP"}
_SCALES = {"thousand": 1e3, "million": 1e6}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?:\s*(?P<zone>.*))?")
_LISTED = re.compile(r"^\s*\d+[.)]\s*(?P<item>.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Reading:
    """What a careful reading of the reads answers. `said` None: the reads cannot give
    the answer, and `why` says what they show instead."""

    said: str | None
    why: str = ""
    stale: tuple[str, str] | None = None  # (updated, today) of a stale page
    value: Quantity | None = None  # lookup, extreme, property: the value stated
    key: str | None = None  # extreme: the entry chosen
    items: tuple[str, ...] = ()  # ranked: the list, in order


def _norm(text: str) -> str:
    return collapse(text).rstrip(".").strip().lower()


def _one_line(text: str) -> str:
    return collapse(text).rstrip(".")


def answer_problem(task: CarefulTask, reading: Reading, answer: str) -> str | None:
    """Why `answer` does not say what the careful reading gives (None: it does), as one
    sentence saying what the page gives instead."""
    if reading.said is None:
        return f"{reading.why}, so the reads do not support the answer."
    instead = f'read with its notes and labels, the page gives "{_one_line(reading.said)}".'
    if _norm(answer) == _norm(reading.said):
        return None
    says_stale = _STALE.search(answer) is not None
    if reading.stale is not None:
        updated, today = reading.stale
        if not says_stale:
            stale = f"the page is stale (last updated {updated}, today is {today})"
            return f"{stale}: its values are not today's."
        dates = {"-".join(m.groups()) for m in _ISO.finditer(answer)}
        return instead if dates - {updated, today} else None
    if says_stale:
        return f"the page is current: {instead}"
    if isinstance(task, Ranked):
        listed = [_norm(m["item"]) for m in _LISTED.finditer(answer)]
        return None if listed == [_norm(item) for item in reading.items] else instead
    return None if _states(task, reading, answer) else instead


def _head(task: Lookup | Extreme | Property) -> str:
    """The task's own words before the value in its answer ("The high for Lisbon:")."""
    said = task.say("\0", "\0") if isinstance(task, Extreme) else task.say("\0")
    return collapse(said.split("\0")[0])


def _rest(task: Lookup | Extreme | Property, answer: str) -> str:
    """What the answer says past the task's own words (else past the entry it names
    and the colon after it, as the bench's judge reads answers)."""
    text, head = collapse(answer), _head(task)
    if text.lower().startswith(head.lower()):
        return text[len(head) :].strip()
    if isinstance(task, Lookup) and (at := text.lower().rfind(task.key.lower())) >= 0:
        text = text[at + len(task.key) :]
    return text.split(": ", 1)[-1].strip()


def _states(task: Lookup | Extreme | Property, reading: Reading, answer: str) -> bool:
    rest = _rest(task, answer)
    if isinstance(task, Extreme):
        found = re.fullmatch(r"(?P<key>.*?)\s*\((?P<value>[^()]*)\)\s*\.?", rest)
        if found is None or clean_key(found["key"]).lower() != (reading.key or "").lower():
            return False
        rest = found["value"]
    return reading.value is not None and same_value(reading.value, rest)


def _dates(text: str) -> list[date]:
    found = [date(int(y), int(m), int(d)) for y, m, d in _ISO.findall(text)]
    for month, day, year in _SLASHED.findall(text):
        try:
            found.append(date(int(year), int(month), int(day)))
        except ValueError:
            return []
    return found


def same_value(value: Quantity, text: str) -> bool:
    """Whether `text` states `value` (see the module's docstring)."""
    text = collapse(text).rstrip(".").strip()
    if isinstance(value.value, date):
        return _dates(text) == [value.value]
    if value.kind == "time":
        clock = _CLOCK.fullmatch(text)
        if clock is None:
            return False
        zone = re.sub(r"\s+", "", clock["zone"] or "")
        return f"{int(clock[1]):02d}:{clock[2]}" == value.value and zone == value.unit
    if isinstance(value.value, str):
        return text.lower() == value.say().lower()
    amount = _AMOUNT.fullmatch(text)
    if amount is None:
        return False
    number = float(amount["n"].replace(",", "")) * _SCALES.get((amount["scale"] or "").lower(), 1)
    unit = _SIGNS.get(amount["sign"] or "", "") or collapse(amount["unit"] or "")
    if amount["sign"] and amount["unit"]:
        return False  # "$19.90 EUR" says two currencies
    close = abs(number - value.value) <= 1e-9 * max(1.0, abs(value.value))
    return close and unit.lower() == value.unit.lower()


# --- the simple rule ---------------------------------------------------------------------------

_PIECES = re.compile(r"(:\s+|;\s+|\s+at\s+)")


def answer_values(answer: str) -> list[str]:
    """The values an answer states, simply: each line (a list item without its number)
    cut at ": ", "; " and " at ", without the labels (a piece before ": ", or a line
    ending with a colon)."""
    values = []
    for line in answer.splitlines():
        listed = _LISTED.match(line)
        parts = _PIECES.split(listed["item"] if listed else line)
        for i in range(0, len(parts), 2):
            piece = parts[i].strip()
            label = i + 1 < len(parts) and parts[i + 1].startswith(":")
            if piece and not label and not piece.endswith(":"):
                values.append(piece.rstrip("."))
    return values


def simple_verdict(answer: str, shown: list[str]) -> str:
    """For a task the stand-in does not read carefully: PASS when every value the answer
    states (answer_values) appears in what the reads show, else FAIL. It checks only that
    the values are on the page, not that they mean what the answer says."""
    values = answer_values(answer)
    if not values:
        return "FAIL: the answer states no value the reads could show."
    haystack = collapse("\n".join(shown)).lower()
    missing = [v for v in values if collapse(v).lower() not in haystack]
    if missing:
        return f'FAIL: the reads do not show "{missing[0]}".'
    return SIMPLE_PASS


def comparison_verdict(replayed: str, full: str) -> str:
    """rote's comparison of a replay's answer with a shadow full run's: SAME when they
    are the same text as answers go (whitespace, case, a final full stop aside)."""
    if _norm(replayed) == _norm(full):
        return "SAME: the two answers say the same."
    return "DIFFERENT: the two answers do not say the same."
