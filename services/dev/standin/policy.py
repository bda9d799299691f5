"""The stand-in's scripted agent: from the task prompt (the first user message) and the
tool results so far, decide the next turn. Pure: no HTTP, no clock, no randomness, so
the same conversation always gets the same next turn.

Vocabulary (case-insensitive; the sentence may sit inside a longer prompt; <URL> is
scheme://... with no spaces or commas; <N> is digits or one..ten):

1. "Open <URL> and report the top <N> <things>"
   browser_navigate {url}; then browser_extract {selector} probing CANDIDATE_SELECTORS
   in order until one returns at least N items (a probe that returns fewer stays in
   the conversation, like a real model exploring); answer exactly
   "Top <N> <things>:\\n1. a\\n2. b\\n3. c" from the first N items (runs of whitespace
   inside an item collapsed to one space).
2. "Open <URL>, click <link text>, and report the top <N> <things>"
   navigate; browser_click {text: <link text>} (quotes around it are dropped); then as 1.
3. "Open <URL>, fill the form with <field>=<value>, <field>=<value> and report the
   confirmation"
   navigate; browser_fill_form {fields: {<field>: <value>, ...}}; browser_read_page;
   answer "Confirmation: <line>" with the first page line that mentions confirm, thank,
   success or received. Values may be quoted to hold commas.
4. "Open <URL> and report the cheapest <thing>"
   navigate; browser_extract {selector, fields} probing CANDIDATE_RECORDS until one
   returns an item with a name and a readable price; answer
   "Cheapest <thing>: <name> at <price>" (the price as the page shows it; the first of
   equal prices wins).
5. "Open <URL>, open the cheapest <thing> and report its <detail>"
   as 4, then browser_click {text: <name>}; browser_read_page; answer
   "Cheapest <thing>: <name> at <price>; <detail>: <value>" where <value> is what follows
   "<detail>:" on the first page line mentioning <detail> (else that whole line).
6. "Open <URL> and extract <css selector>" (the selector may be quoted or backticked)
   navigate; browser_extract {selector}; answer "Items matching <selector>:\\n1. a\\n..."
   (at most 20 items).
7. "Open <URL> and report its title"
   navigate; answer "Title: <title>".
8. "Open <URL> and read the page"
   navigate; browser_read_page; answer "The page reads:\\n<the first 20 non-empty lines>".
9. A judgement prompt for replay steps (no tools needed): any prompt with "cheapest"
   and a JSON array of objects with "price" (and "name"); optionally "answer with its
   <field> only". Answers the <field> (default name) of the cheapest item, nothing else.
10. An answer-again prompt for replay result steps (no tools needed), as rote's
   compiler writes them: "Task (for context): <one of the tasks above, URLs may read
   <url>>", "Answer the task again from today's data ...", and "Today's data:" followed
   by lines "step_N (<tool>): <value>". Answers the task from that data exactly as the
   full run would have answered it from the same tool outputs.
11. A quality-check prompt for replayed answers, as rote's runner writes it
   (services/executor/quality.py): "Quality check of a replayed answer", then
   "<earlier_answer>...</earlier_answer>" and "<new_answer>...</new_answer>". Answers
   "PASS: ..." when the new answer has the earlier one's form — the same words before
   the first line's colon, the same number of lines, and numbered items that are
   neither empty nor repeated (a page of placeholders) — else "FAIL: <the problem>".

Session lost (items 1-8): a tool result "session_lost: ..." (the runner's, when the tools
process holding the page died) starts the script over, as a real model would: navigate to
<URL> again and go on as if fresh, forgetting the steps before it (at most 3 times).

Misbehaviour markers (anywhere in the prompt, for runner tests):
- [standin:stuck]    repeats the same failing call, browser_click
                     {"selector": "#rote-standin-stuck"}, every turn.
- [standin:endless]  never ends the turn: browser_scroll down by a growing amount
                     (browser_read_page when scroll is not offered).
- [standin:fail]     answers an API error: 500 api_error; [standin:fail:<status>]
                     picks the status (429, 529, 400, ...).
- [standin:redacted] also returns a redacted_thinking block beside each tool call.
- [standin:unsupported] puts a server_tool_use block (a web search the server ran)
                     before the text of its answer: content rote's contracts cannot
                     carry, billed all the same.

A short sentence precedes the first tool call ("Let me open <URL>.") and every probe
that follows an unsuccessful one, the way real models narrate. Anything else gets a
text answer saying what the stand-in understands.

Tool results are read from tool_result blocks: the content is the JSON text of the
tool's output (ToolResult.output; a whole ToolResult object is unwrapped too), or plain
text; `is_error` marks a failure whose text is the error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from contracts.tools import SESSION_LOST

# Item selectors tried, in order, for "top N" tasks.
CANDIDATE_SELECTORS: list[str] = [
    ".headline",
    "article .title",
    "li.item",
    "table tbody tr td.name",
    "h2",
    "h3",
    "li",
]

# Row selector and field specs tried, in order, for "cheapest" tasks.
CANDIDATE_RECORDS: list[tuple[str, dict[str, str]]] = [
    (".product", {"name": ".name", "price": ".price"}),
    ("li.item", {"name": ".name", "price": ".price"}),
    ("table tbody tr", {"name": "td.name", "price": "td.price"}),
    ("article", {"name": "h2", "price": ".price"}),
    ("[data-price]", {"name": ".name", "price": "@data-price"}),
]

VOCABULARY: list[str] = [
    "Open <URL> and report the top <N> <things>",
    "Open <URL>, click <link text>, and report the top <N> <things>",
    "Open <URL>, fill the form with <field>=<value>, <field>=<value> and report the confirmation",
    "Open <URL> and report the cheapest <thing>",
    "Open <URL>, open the cheapest <thing> and report its <detail>",
    "Open <URL> and extract <css selector>",
    "Open <URL> and report its title",
    "Open <URL> and read the page",
    "Pick the cheapest <thing> from this JSON and answer with its <field> only: [...]",
    "Task (for context): <task>. Answer the task again from today's data ... "
    "Today's data: step_N (<tool>): <value>",
    "Quality check of a replayed answer ... <earlier_answer>...</earlier_answer> "
    "<new_answer>...</new_answer>",
]

MARKERS: list[str] = [
    "[standin:stuck]",
    "[standin:endless]",
    "[standin:fail]",
    "[standin:fail:<status>]",
    "[standin:redacted]",
    "[standin:unsupported]",
]

# What a runner may append to a cut-off tool output; ignored when reading JSON.
TRUNCATION_NOTE = "\n[output truncated]"
STUCK_CALL: tuple[str, dict[str, Any]] = ("browser_click", {"selector": "#rote-standin-stuck"})
MAX_EXTRACT_ITEMS = 20
READ_LINES = 20
# A browser call whose session died with its tools process fails with SESSION_LOST
# (contracts/tools.py); the model reads it as "session_lost: <message>" and must
# navigate again.
# Session losses the script starts over from; at the next one it answers that it could not
# finish instead of navigating forever.
MAX_SESSION_RESTARTS = 3

_CONFIRMATION_WORDS = ("confirm", "thank", "success", "received")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# --- what the policy sees and decides ---------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One tool call the model made and its result."""

    name: str
    input: dict[str, Any]
    ok: bool
    output: Any = None
    error: str | None = None


@dataclass(frozen=True)
class Conversation:
    prompt: str
    tools: frozenset[str]
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]
    preface: str | None = None
    redacted: bool = False


@dataclass(frozen=True)
class Answer:
    text: str
    unsupported: bool = False


@dataclass(frozen=True)
class ApiFailure:
    status: int
    error_type: str
    message: str


Decision = ToolCall | Answer | ApiFailure


# --- reading a Messages API request -----------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def _result_value(block: dict[str, Any]) -> tuple[bool, Any, str | None]:
    text = _text_of(block.get("content", ""))
    if block.get("is_error"):
        return False, None, text or "tool failed"
    try:
        value = json.loads(text.removesuffix(TRUNCATION_NOTE))
    except (json.JSONDecodeError, ValueError):
        return True, text, None
    # A whole ToolResult object: unwrap it.
    if isinstance(value, dict) and "ok" in value and "output" in value:
        if not value.get("ok"):
            error = value.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return False, None, str(message or "tool failed")
        return True, value.get("output"), None
    return True, value, None


def read_conversation(body: dict[str, Any]) -> Conversation:
    """The prompt, the offered tools and the tool steps of a Messages API request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompt = ""
    for message in messages:
        if message.get("role") == "user":
            prompt = _text_of(message.get("content"))
            break
    tools = frozenset(
        str(tool.get("name"))
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("name")
    )
    calls: list[tuple[str, str, dict[str, Any]]] = []
    results: dict[str, tuple[bool, Any, str | None]] = {}
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if message.get("role") == "assistant" and block.get("type") == "tool_use":
                tool_input = block.get("input")
                calls.append(
                    (
                        str(block.get("id")),
                        str(block.get("name")),
                        tool_input if isinstance(tool_input, dict) else {},
                    )
                )
            elif message.get("role") == "user" and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = _result_value(block)
    steps = []
    for call_id, name, tool_input in calls:
        ok, output, error = results.get(call_id, (False, None, "no result"))
        steps.append(Step(name=name, input=tool_input, ok=ok, output=output, error=error))
    return Conversation(prompt=prompt, tools=tools, steps=tuple(steps))


# --- the task vocabulary ----------------------------------------------------------------

_URL = r"(?P<url>[a-z][a-z0-9+.-]*://[^\s,]+)"
_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_NUM = r"(?P<n>\d+|" + "|".join(_NUMBER_WORDS) + r")"
_END = r"\s*(?=[.!?\n]|$)"
_MARKER = re.compile(r"\[standin:(?P<name>[a-z]+)(?::(?P<arg>[^\]]*))?\]", re.IGNORECASE)
_FLAGS = re.IGNORECASE

_P_CLICK_TOP = re.compile(
    rf"\bopen {_URL},? (?:then )?click (?P<click>.+?),? and (?:then )?report the top {_NUM} "
    rf"(?P<things>[^.!?\n]+?){_END}",
    _FLAGS,
)
_P_TOP = re.compile(
    rf"\bopen {_URL} and report the top {_NUM} (?P<things>[^.!?\n]+?){_END}", _FLAGS
)
_P_FORM = re.compile(
    rf"\bopen {_URL},? (?:then )?fill (?:in )?the form with (?P<fields>.+?),? and "
    rf"(?:then )?report the confirmation",
    _FLAGS,
)
_P_CHEAPEST_DETAIL = re.compile(
    rf"\bopen {_URL},? (?:then )?open the cheapest (?P<thing>.+?),? and report its "
    rf"(?P<detail>[^.!?\n]+?){_END}",
    _FLAGS,
)
_P_CHEAPEST = re.compile(
    rf"\bopen {_URL} and report the cheapest (?P<thing>[^.!?\n]+?){_END}", _FLAGS
)
_P_EXTRACT = re.compile(
    rf"\bopen {_URL} and extract (?:[`\"'](?P<quoted>[^`\"'\n]+)[`\"']|(?P<selector>[^\n]+?))"
    r"\s*(?:\n|$)",
    _FLAGS,
)
_P_TITLE = re.compile(rf"\bopen {_URL} and report (?:its|the page) title", _FLAGS)
_P_READ = re.compile(rf"\bopen {_URL} and read the page", _FLAGS)
_P_ANSWER_FIELD = re.compile(r"answer with (?:its|the) (?P<field>\w+) only", _FLAGS)


def _clean(prompt: str) -> str:
    """Markers out, spaces collapsed (newlines kept: they end sentences)."""
    without = _MARKER.sub("", prompt)
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in without.splitlines())


def _url(match: re.Match[str]) -> str:
    return match.group("url").rstrip(".")


def _number(raw: str) -> int:
    return int(raw) if raw.isdigit() else _NUMBER_WORDS[raw.lower()]


def _unquote(text: str) -> str:
    text = text.strip()
    for left, right in (('"', '"'), ("'", "'"), ("“", "”"), ("`", "`")):
        if len(text) >= 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1]
    return text


def parse_fields(text: str) -> dict[str, str]:
    """'name=Ada, email="a@b.c", note="x, y"' -> {"name": "Ada", ...}."""
    fields: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq].strip().strip(",").strip()
        j = eq + 1
        while j < n and text[j] == " ":
            j += 1
        if j < n and text[j] in "\"'":
            close = text.find(text[j], j + 1)
            close = n if close < 0 else close
            value = text[j + 1 : close]
            comma = text.find(",", close)
            i = n if comma < 0 else comma + 1
        else:
            comma = text.find(",", j)
            end = n if comma < 0 else comma
            value = text[j:end].strip()
            i = end + 1
        if key:
            fields[key] = value
    return fields


def _collapse(value: Any) -> str:
    return " ".join(str(value).split())


def format_list(title: str, items: list[Any]) -> str:
    lines = [f"{i}. {_collapse(item)}" for i, item in enumerate(items, 1)]
    return "\n".join([title, *lines])


def parse_price(value: Any) -> float | None:
    """The first number in a price string: "$1,299.00" -> 1299.0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    found = re.search(r"\d[\d,]*(?:\.\d+)?|\.\d+", value)
    if not found:
        return None
    try:
        return float(found.group(0).replace(",", ""))
    except ValueError:
        return None


def cheapest(items: Any) -> dict[str, Any] | None:
    """The first item with the lowest readable price that also has a name."""
    best: tuple[float, dict[str, Any]] | None = None
    if not isinstance(items, list):
        return None
    for item in items:
        if not isinstance(item, dict) or not item.get("name"):
            continue
        price = parse_price(item.get("price"))
        if price is not None and (best is None or price < best[0]):
            best = (price, item)
    return None if best is None else best[1]


def confirmation_line(text: str) -> str | None:
    for line in text.splitlines():
        if any(word in line.lower() for word in _CONFIRMATION_WORDS) and line.strip():
            return _collapse(line)
    return None


def detail_value(text: str, detail: str) -> str | None:
    wanted = detail.lower()
    for line in text.splitlines():
        lower = line.lower()
        if wanted in lower:
            after = re.search(re.escape(wanted) + r"\s*[:=]\s*(?P<v>.+)", line, re.IGNORECASE)
            return _collapse(after.group("v") if after else line)
    return None


def _open(url: str) -> ToolCall:
    return ToolCall("browser_navigate", {"url": url}, preface=f"Let me open {url}.")


def _string_items(step: Step) -> list[str] | None:
    if not step.ok or not isinstance(step.output, list):
        return None
    return [item for item in step.output if isinstance(item, str) and item.strip()]


_RETRY_PREFACE = "That found nothing usable; let me try another selector."


@dataclass(frozen=True)
class TopN:
    url: str
    n: int
    things: str
    click: str | None = None

    @property
    def tools(self) -> frozenset[str]:
        needed = {"browser_navigate", "browser_extract"}
        if self.click is not None:
            needed.add("browser_click")
        return frozenset(needed)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        rest = steps[1:]
        if self.click is not None:
            if not rest:
                return ToolCall("browser_click", {"text": self.click})
            if not rest[0].ok:
                return Answer(f"I could not click {self.click!r} on {self.url}: {rest[0].error}")
            rest = rest[1:]
        for probe in rest:
            items = _string_items(probe)
            if items is not None and len(items) >= self.n:
                return Answer(format_list(f"Top {self.n} {self.things}:", items[: self.n]))
        tried = {str(probe.input.get("selector")) for probe in rest}
        for selector in CANDIDATE_SELECTORS:
            if selector not in tried:
                preface = _RETRY_PREFACE if rest else None
                return ToolCall("browser_extract", {"selector": selector}, preface=preface)
        return Answer(
            f"I could not find {self.n} {self.things} on {self.url}; I tried the selectors "
            + ", ".join(CANDIDATE_SELECTORS)
            + "."
        )


@dataclass(frozen=True)
class FillForm:
    url: str
    fields: dict[str, str]
    tools: frozenset[str] = frozenset(
        {"browser_navigate", "browser_fill_form", "browser_read_page"}
    )

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_fill_form", {"fields": dict(self.fields)})
        if not steps[1].ok:
            return Answer(f"I could not fill the form on {self.url}: {steps[1].error}")
        if len(steps) == 2:
            return ToolCall("browser_read_page", {})
        page = steps[2].output if steps[2].ok else ""
        line = confirmation_line(page if isinstance(page, str) else json.dumps(page))
        if line is None:
            return Answer("The form was submitted, but the page shows no confirmation.")
        return Answer(f"Confirmation: {line}")


def _find_cheapest(
    probes: tuple[Step, ...],
) -> tuple[int, dict[str, Any]] | ToolCall | None:
    """The index of the probe that found a priced item and that item; else the next
    probe to make; None when every candidate was tried."""
    for index, probe in enumerate(probes):
        if probe.name != "browser_extract":
            continue
        best = cheapest(probe.output) if probe.ok else None
        if best is not None:
            return index, best
    tried = {str(probe.input.get("selector")) for probe in probes}
    for selector, fields in CANDIDATE_RECORDS:
        if selector not in tried:
            preface = _RETRY_PREFACE if probes else None
            return ToolCall(
                "browser_extract", {"selector": selector, "fields": dict(fields)}, preface=preface
            )
    return None


@dataclass(frozen=True)
class Cheapest:
    url: str
    thing: str
    detail: str | None = None

    @property
    def tools(self) -> frozenset[str]:
        needed = {"browser_navigate", "browser_extract"}
        if self.detail is not None:
            needed |= {"browser_click", "browser_read_page"}
        return frozenset(needed)

    def _not_found(self) -> Answer:
        selectors = ", ".join(selector for selector, _ in CANDIDATE_RECORDS)
        return Answer(
            f"I could not find any priced {self.thing} on {self.url}; I tried {selectors}."
        )

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        found = _find_cheapest(steps[1:])
        if found is None:
            return self._not_found()
        if isinstance(found, ToolCall):
            return found
        index, item = found
        name, price = _collapse(item["name"]), _collapse(item.get("price"))
        headline = f"Cheapest {self.thing}: {name} at {price}"
        if self.detail is None:
            return Answer(headline)
        after = steps[1 + index + 1 :]
        if not after:
            return ToolCall("browser_click", {"text": name})
        if not after[0].ok:
            return Answer(f"{headline}; I could not open it: {after[0].error}")
        if len(after) == 1:
            return ToolCall("browser_read_page", {})
        page = after[1].output if after[1].ok else ""
        value = detail_value(page if isinstance(page, str) else "", self.detail)
        if value is None:
            return Answer(f"{headline}; I found no {self.detail} on its page.")
        return Answer(f"{headline}; {self.detail}: {value}")


@dataclass(frozen=True)
class Extract:
    url: str
    selector: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_extract"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_extract", {"selector": self.selector})
        items = _string_items(steps[1])
        if not items:
            return Answer(f"No items match {self.selector} on {self.url}.")
        return Answer(format_list(f"Items matching {self.selector}:", items[:MAX_EXTRACT_ITEMS]))


@dataclass(frozen=True)
class Title:
    url: str
    tools: frozenset[str] = frozenset({"browser_navigate"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        output = steps[0].output
        title = output.get("title") if isinstance(output, dict) else None
        return Answer(f"Title: {_collapse(title or '')}")


@dataclass(frozen=True)
class ReadPage:
    url: str
    tools: frozenset[str] = frozenset({"browser_navigate", "browser_read_page"})

    def next(self, steps: tuple[Step, ...]) -> Decision:
        if not steps:
            return _open(self.url)
        if not steps[0].ok:
            return Answer(f"I could not open {self.url}: {steps[0].error}")
        if len(steps) == 1:
            return ToolCall("browser_read_page", {})
        page = steps[1].output if steps[1].ok and isinstance(steps[1].output, str) else ""
        lines = [line.strip() for line in page.splitlines() if line.strip()][:READ_LINES]
        return Answer("\n".join(["The page reads:", *lines]))


@dataclass(frozen=True)
class PickCheapest:
    items: list[Any]
    answer_field: str = "name"
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        best = cheapest(self.items)
        if best is None:
            return Answer("None of the items has a readable price.")
        return Answer(_collapse(best.get(self.answer_field, "")))


@dataclass(frozen=True)
class AnswerAgain:
    """A replay's result step: answer the original task from fresh tool outputs."""

    task: TopN | FillForm | Cheapest | Extract | Title | ReadPage
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
            return Answer(f"Title: {_collapse(pages[-1].get('title') or '')}")
        elif isinstance(task, TopN | Extract) and lists:
            items = [_collapse(i) for i in lists[-1] if not isinstance(i, dict)]
            if isinstance(task, TopN):
                return Answer(format_list(f"Top {task.n} {task.things}:", items[: task.n]))
            return Answer(
                format_list(f"Items matching {task.selector}:", items[:MAX_EXTRACT_ITEMS])
            )
        elif isinstance(task, Cheapest) and lists:
            best = cheapest(lists[-1])
            if best is not None:
                name, price = _collapse(best["name"]), _collapse(best.get("price"))
                headline = f"Cheapest {task.thing}: {name} at {price}"
                if task.detail is None:
                    return Answer(headline)
                value = detail_value(texts[-1], task.detail) if texts else None
                if value is not None:
                    return Answer(f"{headline}; {task.detail}: {value}")
        return Answer("Today's data does not hold what the task asks for.")


_DATA_LINE = re.compile(r"^(?P<name>step_\d+) \((?P<tool>[\w.-]+)\): ?", re.MULTILINE)


def _data_values(block: str) -> list[tuple[str, Any]]:
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


def _answer_again(prompt: str) -> AnswerAgain | None:
    context = re.search(r"Task \(for context[^)]*\): (?P<task>.+)", prompt)
    data_at = prompt.find("Today's data:")
    if context is None or data_at < 0 or "answer the task again" not in prompt.lower():
        return None
    # The compiler elides URLs; the answer never depends on them.
    task = parse_task(context["task"].replace("<url>", "http://elided.invalid"))
    if task is None or isinstance(task, PickCheapest | AnswerAgain | QualityCheck):
        return None
    return AnswerAgain(task, _data_values(prompt[data_at + len("Today's data:") :]))


_QUALITY = re.compile(
    r"Quality check of a replayed answer.*?<earlier_answer>\n?(?P<earlier>.*?)\n?"
    r"</earlier_answer>.*?<new_answer>\n?(?P<new>.*?)\n?</new_answer>",
    re.DOTALL,
)
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


Task = (
    TopN
    | FillForm
    | Cheapest
    | Extract
    | Title
    | ReadPage
    | PickCheapest
    | AnswerAgain
    | QualityCheck
)


def _json_array(prompt: str) -> list[Any] | None:
    start, end = prompt.find("["), prompt.rfind("]")
    while start >= 0 and end > start:
        try:
            value = json.loads(prompt[start : end + 1])
        except (json.JSONDecodeError, ValueError):
            start = prompt.find("[", start + 1)
            continue
        return value if isinstance(value, list) else None
    return None


def parse_task(prompt: str) -> Task | None:
    text = _clean(prompt)
    # Before the rest: a quality-check prompt quotes the task it checks.
    if quality := _QUALITY.search(prompt):
        return QualityCheck(quality["earlier"], quality["new"])
    if again := _answer_again(prompt):
        return again
    if m := _P_CLICK_TOP.search(text):
        return TopN(_url(m), _number(m["n"]), m["things"].strip(), click=_unquote(m["click"]))
    if m := _P_TOP.search(text):
        return TopN(_url(m), _number(m["n"]), m["things"].strip())
    if m := _P_FORM.search(text):
        return FillForm(_url(m), parse_fields(m["fields"]))
    if m := _P_CHEAPEST_DETAIL.search(text):
        return Cheapest(_url(m), m["thing"].strip(), detail=m["detail"].strip())
    if m := _P_CHEAPEST.search(text):
        return Cheapest(_url(m), m["thing"].strip())
    if m := _P_EXTRACT.search(text):
        return Extract(_url(m), (m["quoted"] or m["selector"]).strip())
    if m := _P_TITLE.search(text):
        return Title(_url(m))
    if m := _P_READ.search(text):
        return ReadPage(_url(m))
    if re.search(r"\bcheapest\b", text, _FLAGS):
        items = _json_array(_MARKER.sub("", prompt))
        if items is not None:
            wanted = _P_ANSWER_FIELD.search(text)
            return PickCheapest(items, answer_field=wanted["field"] if wanted else "name")
    return None


# --- the decision -----------------------------------------------------------------------


def markers(prompt: str) -> dict[str, str | None]:
    return {m["name"].lower(): m["arg"] for m in _MARKER.finditer(prompt)}


def understood() -> str:
    lines = [
        "I am rote's stand-in model, not Claude: I follow a small scripted vocabulary. "
        "I understand these tasks:",
        *(f"- {form}" for form in VOCABULARY),
    ]
    return "\n".join(lines)


def _fail(arg: str | None) -> ApiFailure:
    status = int(arg) if arg and arg.isdigit() and 400 <= int(arg) <= 599 else 500
    error_type = _ERROR_TYPES.get(status, "api_error")
    return ApiFailure(
        status, error_type, f"stand-in failure requested by [standin:fail] ({status})"
    )


def _stuck(conv: Conversation) -> Decision:
    name, tool_input = STUCK_CALL
    if name not in conv.tools:
        if not conv.tools:
            return Answer("[standin:stuck] needs at least one tool to call.")
        name, tool_input = sorted(conv.tools)[0], {}
    return ToolCall(name, dict(tool_input))


def _endless(conv: Conversation) -> Decision:
    k = len(conv.steps)
    if "browser_scroll" in conv.tools:
        return ToolCall("browser_scroll", {"direction": "down", "amount": 200 + 100 * k})
    if "browser_read_page" in conv.tools:
        return ToolCall("browser_read_page", {})
    if conv.tools:
        return ToolCall(sorted(conv.tools)[0], {})
    return Answer("[standin:endless] needs at least one tool to call.")


def decide(conv: Conversation) -> Decision:
    found = markers(conv.prompt)
    if "fail" in found:
        return _fail(found["fail"])
    decision = _next_turn(conv, found)
    if isinstance(decision, ToolCall) and "redacted" in found:
        decision = ToolCall(decision.name, decision.input, decision.preface, redacted=True)
    if isinstance(decision, Answer) and "unsupported" in found:
        decision = Answer(decision.text, unsupported=True)
    return decision


def _next_turn(conv: Conversation, found: dict[str, str | None]) -> Decision:
    if "stuck" in found:
        return _stuck(conv)
    if "endless" in found:
        return _endless(conv)
    task = parse_task(conv.prompt)
    if task is None:
        return Answer(understood())
    missing = sorted(task.tools - conv.tools)
    if missing:
        return Answer(
            f"This task needs the tools {', '.join(missing)}, which the request does not offer."
        )
    steps, losses = current_session(conv.steps)
    if losses and not steps:  # the latest call was refused: the page is gone
        if losses > MAX_SESSION_RESTARTS:
            return Answer(
                f"The browser session was lost {losses} times; I could not finish the task."
            )
        decision = task.next(steps)
        if isinstance(decision, ToolCall) and decision.name == "browser_navigate":
            url = decision.input.get("url")
            return replace(
                decision, preface=f"The browser session was lost; let me open {url} again."
            )
        return decision
    return task.next(steps)


def session_lost(step: Step) -> bool:
    """Whether `step` was refused because the run's browser session was lost."""
    return not step.ok and (step.error or "").startswith(f"{SESSION_LOST}:")


def current_session(steps: tuple[Step, ...]) -> tuple[tuple[Step, ...], int]:
    """The steps since the latest session loss (all of them when there was none), and how
    many losses there were: after a loss the script starts over from its navigation."""
    losses = [i for i, step in enumerate(steps) if session_lost(step)]
    return (steps[losses[-1] + 1 :] if losses else steps), len(losses)
