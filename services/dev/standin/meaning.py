"""What a careful reader takes from a page besides the values it extracts: the notes that
give them meaning (a currency, a unit, "in thousands", the date order, the time zone, the
sort order, footnotes on entries, the page's language, when it was last updated), and
the values read in that light. Pure: text in, meaning out.

The careful tasks (careful.py) read the page before they extract and answer with the
meaning stated ("64 °F", "1,500,000 USD", "2025-04-03", "15:10 UTC+1"). A *literal*
reading (`literal_context`) is what a replay's small model does with the values alone:
the earlier answer's units, English numbers, month-first dates, the list as it comes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

# Portuguese page words a reader knows, as the English ones the tasks use.
GLOSSARY: dict[str, str] = {
    "cidade": "city", "céu": "sky", "máxima": "high", "mínima": "low", "chuva": "rain",
    "produto": "product", "preço": "price", "stock": "stock", "saldo": "sale price",
    "preço de saldo": "sale price", "trimestre": "quarter", "receita": "revenue",
    "custos": "costs", "lucro": "profit", "destino": "destination", "comboio": "train",
    "partida": "departure", "plataforma": "platform", "evento": "event", "data": "date",
    "local": "venue", "peso": "weight", "largura": "width", "altura": "height",
    "capacidade": "capacity",
}  # fmt: skip
# Words only a Portuguese page shows (the page's language, read from its text).
_PT_WORDS = re.compile(r"\b(?:Hoje é|Atualizado|Preços em|Valores em|Datas|Horas em|primeiro)\b")

_TODAY = re.compile(r"\b(?:Today is|Hoje é) (\d{4}-\d{2}-\d{2})")
_UPDATED = re.compile(r"\b(?:Updated|Atualizado(?: em)?) (\d{4}-\d{2}-\d{2})")
_CURRENCY = re.compile(r"\b(?:in|em) (USD|EUR|GBP)\b")
_THOUSANDS = re.compile(r"\b(?:thousands|milhares)\b|\(000s\)", re.IGNORECASE)
_MILLIONS = re.compile(r"\b(?:millions|milhões)\b", re.IGNORECASE)
_DAY_FIRST = re.compile(r"day/month/year|dia/mês/ano|DD/MM/YYYY", re.IGNORECASE)
_MONTH_FIRST = re.compile(r"month/day/year|MM/DD/YYYY", re.IGNORECASE)
_ZONE = re.compile(r"\b(?:Times|Horas)\b[^.\n]*?\b(UTC(?:\s*[+-]\s*\d{1,2})?)")
_FOOTNOTE = re.compile(r"^\s*(\*+)\s*(\S.*)$", re.MULTILINE)
_UNAVAILABLE = re.compile(
    r"discontinued|no longer (?:sold|available)|sold out|descontinuado|esgotado", re.IGNORECASE
)
# "Newest first", "Oldest first", "Mais recentes primeiro": the order a list is in.
_ORDER_WORDS: dict[str, tuple[str, str]] = {
    "newest": ("time", "desc"), "latest": ("time", "desc"), "most recent": ("time", "desc"),
    "oldest": ("time", "asc"), "earliest": ("time", "asc"),
    "most read": ("reads", "desc"), "least read": ("reads", "asc"),
    "highest": ("value", "desc"), "lowest": ("value", "asc"),
    "mais recentes": ("time", "desc"), "mais antigos": ("time", "asc"),
    "mais lidos": ("reads", "desc"), "menos lidos": ("reads", "asc"),
}  # fmt: skip
_ORDER = re.compile(
    r"\b(" + "|".join(sorted(_ORDER_WORDS, key=len, reverse=True)) + r") (?:first|primeiro)",
    re.IGNORECASE,
)


def order_of(words: str) -> tuple[str, str] | None:
    """The (key, direction) an order word names: "newest" -> ("time", "desc")."""
    return _ORDER_WORDS.get(" ".join(words.lower().split()))


@dataclass(frozen=True)
class PageContext:
    lang: str = "en"
    today: date | None = None
    updated: date | None = None
    currency: str | None = None  # a page-wide note: "Prices in EUR"
    scale: int = 1  # "in thousands"
    day_first: bool = False
    zone: str | None = None  # "UTC", "UTC+1"
    order: tuple[str, str] | None = None  # ("time", "desc") from "Newest first"
    footnotes: dict[str, str] = field(default_factory=dict)  # "*" -> its note
    unit: str | None = None  # a literal reading: the earlier answer's unit

    @property
    def stale(self) -> bool:
        """Last updated more than a day before the page's own today."""
        return bool(self.today and self.updated and (self.today - self.updated).days > 1)

    def unavailable(self, name: str) -> bool:
        """An entry whose footnote marker says it cannot be had (discontinued, sold out)."""
        marks = re.search(r"(\*+)\s*$", name)
        note = self.footnotes.get(marks.group(1)) if marks else None
        return bool(note and _UNAVAILABLE.search(note))


def _day(pattern: re.Pattern[str], text: str) -> date | None:
    found = pattern.search(text)
    return date.fromisoformat(found.group(1)) if found else None


def read_context(text: str, lang: str | None = None) -> PageContext:
    """The notes of a page's visible text (browser_read_page's output). `lang`: the
    page's language when known otherwise (its lang attribute), else read from its words."""
    lang = lang or ("pt" if len(_PT_WORDS.findall(text)) >= 2 else "en")
    currency = _CURRENCY.search(text)
    zone = _ZONE.search(text)
    order = _ORDER.search(text)
    scale = 1_000_000 if _MILLIONS.search(text) else 1000 if _THOUSANDS.search(text) else 1
    if _DAY_FIRST.search(text):
        day_first = True
    elif _MONTH_FIRST.search(text):
        day_first = False
    else:
        day_first = lang == "pt"
    return PageContext(
        lang=lang,
        today=_day(_TODAY, text),
        updated=_day(_UPDATED, text),
        currency=currency.group(1) if currency else None,
        scale=scale,
        day_first=day_first,
        zone=re.sub(r"\s+", "", zone.group(1)) if zone else None,
        order=order_of(order.group(1)) if order else None,
        footnotes={m.group(1): m.group(2).strip() for m in _FOOTNOTE.finditer(text)},
    )


def stale_answer(ctx: PageContext) -> str:
    return f"The page is stale: last updated {ctx.updated}, today is {ctx.today}."


# --- labels ----------------------------------------------------------------------------------

_UNIT_IN_LABEL = re.compile(r"\(([^)]*)\)\s*$")


def label_words(label: str) -> str:
    """A column or field label as English words, without its unit: "Máxima (°F)" -> "high"."""
    bare = _UNIT_IN_LABEL.sub("", label).strip().lower()
    return GLOSSARY.get(bare, bare)


def label_unit(label: str) -> str | None:
    found = _UNIT_IN_LABEL.search(label)
    return found.group(1).strip() if found else None


def find_label(labels: list[str], wanted: str) -> int | None:
    """The 0-based position of the label that names `wanted` ("high", "sale price")."""
    want = " ".join(wanted.lower().split())
    for i, label in enumerate(labels):
        if label_words(label) == want:
            return i
    return None


def field_name(words: str) -> str:
    """A record field name for a label or a task's words: "Sale price" -> "sale_price"."""
    return "_".join(re.findall(r"\w+", label_words(words))) or "value"


# --- values ----------------------------------------------------------------------------------

_TEMPERATURE = {"°F", "°C"}
_MONEY = {"USD", "EUR", "GBP"}
_MEASURES = {"kg": "weight", "lb": "weight", "l": "volume", "fl oz": "volume", "cm": "length",
             "in": "length", "%": "percent"}  # fmt: skip
_MONEY_WORDS = {"price", "sale price", "revenue", "costs", "profit"}
_DATE_WORDS = {"date"}
_TIME_WORDS = {"departure", "time", "arrival"}


@dataclass(frozen=True)
class Quantity:
    kind: str  # temperature, money, weight, volume, length, percent, date, time, text
    value: float | date | str
    unit: str = ""
    decimals: int = 0  # money: as many as the page wrote (a price's cents)

    def say(self) -> str:
        if isinstance(self.value, date):
            return self.value.isoformat()
        if isinstance(self.value, str):
            return self.value if not self.unit else f"{self.value} {self.unit}"
        if self.kind == "money":
            return f"{self.value:,.{self.decimals}f} {self.unit}".strip()
        return f"{self.value:g} {self.unit}".strip()


def parse_number(raw: str, lang: str = "en") -> float | None:
    """The first number of `raw` as the page's language writes numbers: "1,234.5" (en),
    "1.234,5" (pt). A comma (en) groups thousands only before exactly three digits."""
    if lang == "pt":
        found = re.search(r"-?\d{1,3}(?:\.\d{3})+(?:,\d+)?|-?\d+(?:,\d+)?", raw)
        return float(found.group(0).replace(".", "").replace(",", ".")) if found else None
    found = re.search(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?", raw)
    return float(found.group(0).replace(",", "")) if found else None


def parse_date(raw: str, day_first: bool) -> date | None:
    iso = re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", raw)
    if iso:
        return date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3)))
    slashed = re.search(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b", raw)
    if not slashed:
        return None
    a, b, year = (int(slashed.group(i)) for i in (1, 2, 3))
    day, month = (a, b) if day_first else (b, a)
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _kind(label: str, unit: str | None) -> str:
    if unit in _TEMPERATURE:
        return "temperature"
    if unit in _MONEY:
        return "money"
    if unit in _MEASURES:
        return _MEASURES[unit]
    words = label_words(label)
    if words in _MONEY_WORDS:
        return "money"
    if words in _DATE_WORDS:
        return "date"
    if words in _TIME_WORDS:
        return "time"
    return "text"


def read_value(raw: str, label: str, ctx: PageContext) -> Quantity:
    """A cell read in the light of its label and the page's notes."""
    raw = " ".join(raw.split())
    unit = label_unit(label)
    kind = _kind(label, unit)
    if kind == "date":
        day = parse_date(raw, ctx.day_first)
        return Quantity("date", day) if day else Quantity("text", raw)
    if kind == "time":
        clock = re.search(r"\b(\d{1,2}):(\d{2})\b", raw)
        if not clock:
            return Quantity("text", raw)
        return Quantity("time", f"{int(clock.group(1)):02d}:{clock.group(2)}", ctx.zone or "")
    if kind == "text":
        return Quantity("text", raw)
    number = parse_number(raw, ctx.lang)
    if number is None:
        return Quantity("text", raw)
    if kind == "money":
        currency = unit if unit in _MONEY else ctx.currency or ""
        cents = ctx.scale == 1 and re.search(r"\.\d{2}$" if ctx.lang == "en" else r",\d{2}$", raw)
        return Quantity("money", number * ctx.scale, currency, 2 if cents else 0)
    return Quantity(kind, number, unit or "")


def literal_context(example: str) -> PageContext:
    """What a replay's small model reads values with: only the earlier answer's unit (the
    last "<number> <unit>" or "<time> <zone>" in it); no page notes."""
    zone = re.search(r"\d{1,2}:\d{2} (UTC(?:[+-]\d{1,2})?)", example)
    unit = re.search(r"\d (°F|°C|USD|EUR|GBP|kg|lb|fl oz|l|cm|in|%)(?!\w)", example)
    return PageContext(zone=zone.group(1) if zone else None, unit=unit.group(1) if unit else None)


def read_literally(raw: str, ctx: PageContext) -> str:
    """A value as a literal reader states it: a slashed date month-first as ISO, a time
    with the earlier answer's zone, a number as written with the earlier answer's unit."""
    raw = " ".join(raw.split())
    day = parse_date(raw, False)
    if day is not None:
        return day.isoformat()
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", raw)
    if clock:
        return f"{int(clock.group(1)):02d}:{clock.group(2)} {ctx.zone or ''}".strip()
    if ctx.unit and re.fullmatch(r"-?[\d.,]+", raw):
        return f"{raw} {ctx.unit}"
    return raw


def literal_score(raw: str) -> float | None:
    """A value to rank by as it reads: a month-first date, a time, an English number."""
    raw = " ".join(raw.split())
    day = parse_date(raw, False)
    if day is not None:
        return float(day.toordinal())
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", raw)
    if clock:
        return float(int(clock.group(1)) * 60 + int(clock.group(2)))
    return parse_number(raw)


def comparable(q: Quantity) -> float | None:
    """A number to rank quantities of one kind by (dates by day, times by minute)."""
    if isinstance(q.value, date):
        return float(q.value.toordinal())
    if isinstance(q.value, str):
        clock = re.fullmatch(r"(\d{2}):(\d{2})", q.value)
        return float(int(clock.group(1)) * 60 + int(clock.group(2))) if clock else None
    return float(q.value)
