"""The prompts rote writes for replays that the stand-in answers without tools (items
9-11 of the policy's vocabulary): pick the cheapest item of a JSON list, answer a task
again from today's data, and judge a replayed answer's form."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

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

    task: BrowsingTask
    data: list[tuple[str, Any]]
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
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
