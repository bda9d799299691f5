"""The drift corpus read offline: the stand-in's careful full run on a page state, with
its tools answered from the page's DOM (services/dev/bench/corpus_oracle.py's small DOM
and selector matcher: navigate, read the page, extract); what that run records (its
extract inputs, the selectors a compiled executor would replay); and those recorded
reads replayed on another state and read from the same places, as a replay re-reads
them (`same_places`).

The unit tests use it to check the corpus: a full run answers as the truth says on every
state, each silent drift keeps the recorded reads matching and makes what they find at
the same places wrong, and each breaking change leaves a recorded read with nothing to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from services.dev.bench.corpus_oracle import Node, field_value, parse, select
from services.dev.bench.drift.sites import SITES
from services.dev.bench.drift.state import PageState
from services.dev.bench.drift.tasks import DriftTask
from services.dev.standin.careful import CarefulTask, Property
from services.dev.standin.careful_again import answer_again
from services.dev.standin.conversation import Answer, Conversation, Step, ToolCall
from services.dev.standin.meaning import find_label, literal_context, read_literally
from services.dev.standin.policy import decide
from services.dev.standin.vocabulary import parse_task

ORIGIN = "http://127.0.0.1:8000"
TOOLS = frozenset({"browser_navigate", "browser_read_page", "browser_extract", "browser_click"})


@dataclass
class Page:
    """What a browser holds for one page state: the document it navigated to."""

    task: DriftTask
    state: PageState
    doc: Node | None = None
    title: str = ""

    def call(self, call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_navigate":
            path = urlsplit(str(call.input["url"])).path
            status, body = SITES[self.task.site].render(path, self.state)
            self.doc = parse(body)
            self.title = select(self.doc, "title")[0].text
            return True, {"url": call.input["url"], "status": status, "title": self.title}
        if self.doc is None:
            return False, "no page is open"
        if call.name == "browser_read_page":
            return True, "\n".join(self.doc.lines())
        if call.name == "browser_extract":
            return True, extract(self.doc, call.input)
        return False, f"{call.name} is not offered"


def extract(doc: Node, tool_input: dict[str, Any]) -> list[Any]:
    nodes = select(doc, str(tool_input["selector"]))
    fields = tool_input.get("fields")
    if isinstance(fields, dict):
        return [{k: field_value(n, str(spec)) for k, spec in fields.items()} for n in nodes]
    return [n.text for n in nodes]


@dataclass(frozen=True)
class FullRun:
    answer: str
    steps: tuple[Step, ...]

    @property
    def reads(self) -> list[dict[str, Any]]:
        """The extract inputs whose results the answer came from (the last probe of each
        selector that found something): what a compiled executor replays."""
        return [s.input for s in self.steps if s.name == "browser_extract" and s.ok and s.output]


def full_run(task: DriftTask, state: PageState) -> FullRun:
    """The stand-in's careful full run of `task` on `state`."""
    prompt = task.prompt_for(ORIGIN)
    page = Page(task, state)
    steps: list[Step] = []
    for _ in range(20):
        decision = decide(Conversation(prompt=prompt, tools=TOOLS, steps=tuple(steps)))
        if isinstance(decision, Answer):
            return FullRun(decision.text, tuple(steps))
        assert isinstance(decision, ToolCall), decision
        ok, output = page.call(decision)
        steps.append(
            Step(decision.name, decision.input, ok, output if ok else None, None if ok else output)
        )
    raise AssertionError(f"{task.task_id}: the stand-in's full run did not finish")


def replayed_reads(task: DriftTask, state: PageState, reads: list[dict[str, Any]]) -> list[Any]:
    """What each recorded read finds on `state`."""
    page = Page(task, state)
    ok, _ = page.call(ToolCall("browser_navigate", {"url": task.prompt_for(ORIGIN).split()[1]}))
    assert ok and page.doc is not None
    return [extract(page.doc, read) for read in reads]


def same_places(task: DriftTask, earlier: FullRun, state: PageState) -> str | None:
    """The earlier run's reads replayed on `state` and read from the same places (a
    record by its key and field names, a labelled value at its earlier position, a list's
    first items), with the earlier answer's unit and no page notes: what a replay that
    re-reads the recorded selectors sees."""
    careful = parse_task(task.prompt_for(ORIGIN))
    assert isinstance(careful, CarefulTask)
    found = replayed_reads(task, state, earlier.reads)
    if isinstance(careful, Property):
        labels = next(s.output for s in earlier.steps if s.input == earlier.reads[0])
        at = find_label([str(label) for label in labels], careful.field)
        values = found[-1]
        if at is None or at >= len(values):
            return None
        return careful.say(read_literally(str(values[at]), literal_context(earlier.answer)))
    return answer_again(careful, [("browser_extract", value) for value in found], earlier.answer)
