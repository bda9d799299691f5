"""An answer against the ground truth, tolerant of form, strict on meaning.

An answer may state a value in any unit it names (64 °F or 17.8 °C; 19.90 USD or
16.92 EUR or $19.90; 1.5 million USD; 15:10 UTC+1 for 14:10 UTC; 2025-04-03 or
3 April 2025); a value without a unit is read in the unit the task was set up with (the
clean page's: °F, USD, kg, l, cm, UTC, month-first dates), as its reader would. It must
not state a wrong value, unit, entry, order or date, and on a stale copy it must say the
page is stale instead of reporting its values as today's. Numbers are read as English
writes them ("1,234.5"; "19,90" is not nineteen point nine). This is the benchmark's own
reading, apart from the stand-in's (services/dev/standin/meaning.py), so the stand-in
does not mark its own answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from services.dev.bench.drift.pages import FL_OZ_PER_L, LB_PER_KG
from services.dev.bench.drift.state import EUR_PER_USD
from services.dev.bench.drift.truth import Truth, Value

_STALE = re.compile(r"\bstale\b|out of date|outdated|not (?:been )?updated", re.IGNORECASE)
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_SCALE = r"(?:\s*(?P<scale>thousand|million|k\b|m\b))?"
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december"]  # fmt: skip
_ZONES = {"UTC": 0, "GMT": 0, "WET": 0, "CET": 60, "CEST": 120, "WEST": 60}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    why: str


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _scaled(value: float, scale: str | None) -> float:
    factor = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6}.get((scale or "").lower(), 1)
    return value * factor


def _money(answer: str) -> list[float]:
    """Amounts in USD: a currency code or sign beside a number; bare numbers as USD."""
    rate = {"USD": 1.0, "$": 1.0, "EUR": EUR_PER_USD, "€": EUR_PER_USD}
    found: list[float] = []
    pattern = re.compile(
        rf"(?P<pre>USD|EUR|\$|€)?\s?(?P<n>{_NUMBER}){_SCALE}(?:\s?(?P<post>USD|EUR|\$|€))?"
    )
    for m in pattern.finditer(answer):
        currency = m["pre"] or m["post"] or "USD"
        found.append(_scaled(_num(m["n"]), m["scale"]) / rate[currency])
    return found


def _measured(answer: str, units: dict[str, float], bare: float) -> list[float]:
    """Numbers in the canonical unit: `units` maps a written unit to its factor."""
    names = "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True))
    found = []
    for m in re.finditer(rf"(?P<n>{_NUMBER})\s*(?P<u>{names})?(?![\w])", answer):
        factor = units[m["u"]] if m["u"] else bare
        found.append(_num(m["n"]) / factor)
    return found


def _temperatures(answer: str) -> list[float]:
    found = []
    for m in re.finditer(rf"(?P<n>{_NUMBER})\s*(?:°\s*(?P<u>[CF])|(?P<w>degrees)?)", answer):
        value = _num(m["n"])
        found.append(value * 9 / 5 + 32 if m["u"] == "C" else value)
    return found


def _dates(answer: str) -> list[date]:
    found = []
    for m in re.finditer(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", answer):
        found.append(date(int(m[1]), int(m[2]), int(m[3])))
    for m in re.finditer(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b", answer):
        found.append(date(int(m[3]), int(m[1]), int(m[2])))  # month first: the task's
    months = "|".join(_MONTHS)
    for m in re.finditer(rf"\b(\d{{1,2}}) ({months}),? (\d{{4}})\b", answer, re.IGNORECASE):
        found.append(date(int(m[3]), _MONTHS.index(m[2].lower()) + 1, int(m[1])))
    for m in re.finditer(rf"\b({months}) (\d{{1,2}}),? (\d{{4}})\b", answer, re.IGNORECASE):
        found.append(date(int(m[3]), _MONTHS.index(m[1].lower()) + 1, int(m[2])))
    return found


def _times(answer: str) -> list[int]:
    """Minutes after midnight UTC of each HH:MM, by the zone written after it."""
    zones = "|".join(_ZONES)
    found = []
    for m in re.finditer(
        rf"\b(\d{{1,2}}):(\d{{2}})\b(?:\s*\(?(?:(?P<z>{zones})\s*)?(?P<off>[+-]\d{{1,2}})?)?",
        answer,
    ):
        offset = _ZONES.get(m["z"] or "UTC", 0)
        if m["off"]:
            offset = int(m["off"]) * 60
        found.append((int(m[1]) * 60 + int(m[2]) - offset) % (24 * 60))
    return found


def _stated(answer: str, value: Value) -> list[float | date | int]:
    if value.kind == "temperature":
        return list(_temperatures(answer))
    if value.kind == "money":
        return list(_money(answer))
    if value.kind == "weight":
        return list(_measured(answer, {"kg": 1.0, "lb": LB_PER_KG}, 1.0))
    if value.kind == "volume":
        return list(_measured(answer, {"l": 1.0, "L": 1.0, "fl oz": FL_OZ_PER_L}, 1.0))
    if value.kind == "length":
        return list(_measured(answer, {"cm": 1.0}, 1.0))
    if value.kind == "date":
        return list(_dates(answer))
    return list(_times(answer))


def _close(stated: float | date | int, truth: float | date | str, kind: str) -> bool:
    if isinstance(truth, date) or isinstance(stated, date):
        return stated == truth
    assert isinstance(truth, int | float)
    tolerance = {"temperature": 1.0, "time": 0.0, "length": 0.5}.get(kind)
    if tolerance is None:  # money, weight, volume: a conversion's rounding
        tolerance = max(0.011, abs(truth) * 0.02 if kind != "money" else abs(truth) * 0.01)
    return abs(float(stated) - float(truth)) <= tolerance


def _value_part(answer: str, key: str | None) -> str:
    """What the answer says after naming its entry and its label (an entry's own name
    may hold numbers: "Q2"); a time's colon has no space after it."""
    if key and (at := answer.lower().rfind(key.lower())) >= 0:
        answer = answer[at + len(key) :]
    return answer.split(": ", 1)[-1]


def check_value(answer: str, value: Value, key: str | None = None) -> Verdict:
    part = _value_part(answer, key)
    if value.kind == "text":
        text = str(value.amount)
        ok = re.search(rf"(?<![\w:.,]){re.escape(text)}(?![\w:]|[.,]\d)", part) is not None
        return Verdict(ok, "states it" if ok else f"does not state {text!r}")
    stated = _stated(part, value)
    if not stated:
        return Verdict(False, f"states no {value.kind}")
    wrong = [s for s in stated if not _close(s, value.amount, value.kind)]
    if wrong:
        return Verdict(False, f"states {wrong[0]} where the page means {value.describe()}")
    return Verdict(True, "states it")


def _named(answer: str, name: str) -> int | None:
    found = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", answer, re.IGNORECASE)
    return found.start() if found else None


def judge(answer: str | None, truth: Truth) -> Verdict:
    """Whether `answer` says what the page means (see the module's docstring)."""
    if not answer:
        return Verdict(False, "no answer")
    says_stale = _STALE.search(answer) is not None
    if truth.stale:
        why = "says the page is stale" if says_stale else "reports stale data as today's"
        return Verdict(says_stale, why)
    if says_stale:
        return Verdict(False, "calls a fresh page stale")
    if truth.form == "ranked":
        found = [(pos, name) for name in truth.keys if (pos := _named(answer, name)) is not None]
        listed = tuple(name for _, name in sorted(found))
        ok = listed == truth.names
        return Verdict(ok, "lists them in order" if ok else f"lists {list(listed)}")
    if truth.form == "extreme":
        others = [k for k in truth.keys if k != truth.key and _named(answer, k) is not None]
        if truth.key is None or _named(answer, truth.key) is None or others:
            return Verdict(False, f"names {others or 'another entry'}, not {truth.key}")
    assert truth.value is not None
    return check_value(answer, truth.value, truth.key)
