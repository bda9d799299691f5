"""The prompts rote writes for replays that the stand-in answers without tools (items
9-11 and 16 of the policy's vocabulary): pick the cheapest item of a JSON list, answer a
task again from today's data, judge a replayed answer's form, and pick again the item a
careful task needs. What they say about a careful task (careful.py) they say *literally*,
from the values as they read: the page's notes are not in what a replay's prompt asks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from services.dev.standin.careful import CarefulTask, Extreme, Lookup
from services.dev.standin.careful_again import (
    answer_again,
    field_value,
    key_field,
    pick_literally,
)
from services.dev.standin.conversation import Answer, Decision, Step
from services.dev.standin.reading import (
    cheapest,
    collapse,
    confirmation_line,
    detail_value,
    format_list,
)
from services.dev.standin.scripts import (
    MAX_EXTRACT_ITEMS,
    READ_LINES,
    BrowsingTask,
    Cheapest,
    Extract,
    FillForm,
    ReadPage,
    Title,
    TopN,
)


@dataclass(frozen=True)
class PickCheapest:
    items: list[Any]
    answer_field: str = "name"
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        best = cheapest(self.items)
        if best is None:
            return Answer("None of the items has a readable price.")
        return Answer(collapse(best.get(self.answer_field, "")))


@dataclass(frozen=True)
class AnswerAgain:
    """A replay's result step: answer the original task from fresh tool outputs."""

    task: BrowsingTask | CarefulTask
    data: list[tuple[str, Any]]
    tools: frozenset[str] = field(default_factory=frozenset)
    example: str = ""  # the earlier answer the prompt shows as the form

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if isinstance(self.task, CarefulTask):
            said = answer_again(self.task, self.data, self.example)
            return Answer(said or "Today's data does not hold what the task asks for.")
        texts = [v for _, v in self.data if isinstance(v, str)]
        lists = [v for _, v in self.data if isinstance(v, list)]
        pages = [v for _, v in self.data if isinstance(v, dict)]
        task = self.task
        if isinstance(task, FillForm) and texts:
            line = confirmation_line(texts[-1])
            if line is not None:
                return Answer(f"Confirmation: {line}")
        elif isinstance(task, ReadPage) and texts:
            lines = [line.strip() for line in texts[-1].splitlines() if line.strip()]
            return Answer("\n".join(["The page reads:", *lines[:READ_LINES]]))
        elif isinstance(task, Title) and pages:
            return Answer(f"Title: {collapse(pages[-1].get('title') or '')}")
        elif isinstance(task, TopN | Extract) and lists:
            items = [collapse(i) for i in lists[-1] if not isinstance(i, dict)]
            if isinstance(task, TopN):
                return Answer(format_list(f"Top {task.n} {task.things}:", items[: task.n]))
            return Answer(
                format_list(f"Items matching {task.selector}:", items[:MAX_EXTRACT_ITEMS])
            )
        elif isinstance(task, Cheapest) and lists:
            best = cheapest(lists[-1])
            if best is not None:
                name, price = collapse(best["name"]), collapse(best.get("price"))
                headline = f"Cheapest {task.thing}: {name} at {price}"
                if task.detail is None:
                    return Answer(headline)
                value = detail_value(texts[-1], task.detail) if texts else None
                if value is not None:
                    return Answer(f"{headline}; {task.detail}: {value}")
        return Answer("Today's data does not hold what the task asks for.")


_PICK_FIRST = re.compile(
    r"The task needs one item from the list below\. Last time it chose item (?P<i>\d+) of "
    r"\d+, whose (?P<field>\S+) was .*?answer with (?:its (?P<answer>\S+)|the item exactly "
    r"as written) only\.",
    re.DOTALL,
)
_PICK_NEXT = re.compile(
    r"The task chose one item from the list below: the one whose (?P<field>\S+) is "
    r"(?P<value>.*?)\. Answer with (?:its (?P<answer>\S+)|the item exactly as written) only\.",
    re.DOTALL,
)
_PICK_LIST = re.compile(r"^step_\d+ \([\w.-]+\): ?(?P<list>\[.*)$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class PickAgain:
    """16. A compiler's pick prompt about a careful task: the item the task asks for,
    chosen from today's list as its values read (the first pick), or the item an earlier
    pick named (the next ones); answered with the field asked for."""

    task: CarefulTask
    items: list[Any]
    answer_field: str | None  # None: the item as written
    named: tuple[str, str] | None = None  # (field, value) of an earlier pick
    position: int = 0  # 1-based: the item chosen last time
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        records = [i for i in self.items if isinstance(i, dict)]
        lookup = isinstance(self.task, Lookup | Extreme)
        if (not records or not lookup) and 0 < self.position <= len(self.items):
            # No rule of the task's picks from this list (a list of texts, a value by
            # its place): "the same way" is the same place.
            item = self.items[self.position - 1]
            if self.answer_field is None or not isinstance(item, dict):
                return Answer(collapse(item))
            return Answer(collapse(item.get(self.answer_field, "")))
        chosen: dict[str, Any] | None
        if self.named is not None:
            name, value = self.named
            chosen = next((r for r in records if collapse(r.get(name)) == value), None)
        elif isinstance(self.task, Lookup | Extreme):
            chosen = pick_literally(self.task, records, self._key(records))
        else:
            chosen = None
        if chosen is None:
            return Answer("None of today's items is the one the task asks for.")
        if self.answer_field is None:
            return Answer(json.dumps(chosen, ensure_ascii=False))
        return Answer(collapse(field_value(chosen, self.answer_field) or ""))

    def _key(self, records: list[dict[str, Any]]) -> str:
        task = self.task
        assert isinstance(task, Lookup | Extreme)
        return (key_field(records[0], task) if records else None) or "name"


def pick_prompt(task: CarefulTask, prompt: str) -> PickAgain | None:
    listed = _PICK_LIST.search(prompt)
    try:
        items = json.loads(listed["list"]) if listed else None
    except ValueError:
        items = None
    if not isinstance(items, list):
        return None
    if first := _PICK_FIRST.search(prompt):
        return PickAgain(task, items, first["answer"], position=int(first["i"]))
    if later := _PICK_NEXT.search(prompt):
        named = (later["field"], collapse(later["value"]))
        return PickAgain(task, items, later["answer"], named=named)
    return None


_DATA_LINE = re.compile(r"^(?P<name>step_\d+) \((?P<tool>[\w.-]+)\): ?", re.MULTILINE)


def data_values(block: str) -> list[tuple[str, Any]]:
    """The `step_N (tool): value` lines of a "Today's data" block; a value runs to the
    next such line and is JSON when it parses as JSON."""
    marks = list(_DATA_LINE.finditer(block))
    values: list[tuple[str, Any]] = []
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        raw = block[mark.end() : following.start() if following else len(block)].strip()
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        values.append((mark["tool"], value))
    return values


_ITEM = re.compile(r"^\d+[.)]\s*(?P<item>.*)$")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines() if line.strip()]


def _head(line: str) -> str:
    return line.split(":", 1)[0].strip().lower() if ":" in line else ""


def form_problem(earlier: str, answer: str) -> str | None:
    """Why `answer` does not have the form of `earlier` (None: it does)."""
    old, new = _lines(earlier), _lines(answer)
    if not new:
        return "the new answer is empty"
    if old and _head(old[0]) != _head(new[0]):
        return "it does not begin like the earlier answer"
    if old and len(old) != len(new):
        return f"it has {len(new)} lines where the earlier answer has {len(old)}"
    items = [m["item"].strip() for line in new if (m := _ITEM.match(line))]
    if any(not item for item in items):
        return "a listed item is empty"
    if len(set(items)) < len(items):
        return "listed items repeat, like placeholders rather than data"
    return None


@dataclass(frozen=True)
class QualityCheck:
    """A replayed answer judged against the form of the earlier, verified answer."""

    earlier: str
    answer: str
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        problem = form_problem(self.earlier, self.answer)
        if problem is not None:
            return Answer(f"FAIL: {problem}.")
        return Answer("PASS: it has the earlier answer's form, with values of its own.")
