"""The stand-in's task vocabulary: a prompt parsed into the task it names (the policy's
docstring lists the forms), or None when the stand-in does not understand it."""

from __future__ import annotations

import json
import re
from typing import Any

from services.dev.standin.careful import CarefulTask, Extreme, Lookup, Property, Ranked
from services.dev.standin.healing import Heal, heal_prompt_of
from services.dev.standin.replay_prompts import (
    AnswerAgain,
    PickAgain,
    PickCheapest,
    QualityCheck,
    data_values,
    pick_prompt,
)
from services.dev.standin.scripts import (
    BrowsingTask,
    Cheapest,
    Extract,
    FillForm,
    ReadPage,
    Title,
    TopN,
)
from services.dev.standin.verifying import (
    Compare,
    Verify,
    comparison_prompt_of,
    verification_prompt_of,
)
from services.executor.healing import HEAL_HEAD
from services.executor.verification import COMPARISON_HEAD, PROMPT_HEAD

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
    "Open <URL> and report the <field> for <key>",
    "Open <URL> and report the <thing> with the highest|lowest|earliest|latest <field>",
    "Open <URL> and report its <field>",
    "Open <URL> and report the <N> newest|latest|oldest|earliest|most read|least read <things>",
    "Task (for context; do not perform it): <task 12 or 13> ... The task needs one item from "
    "the list below ... answer with its <field> only ... step_N (<tool>): [...]",
    "Verification of a replayed answer. ... Task: <task> <answer>...</answer> <changes>..."
    "</changes> <read ...>...</read> Reply with PASS or FAIL ...",
    "Comparison of two answers to one task. ... <replayed_answer>...</replayed_answer> "
    "<full_answer>...</full_answer> Reply with SAME or DIFFERENT ...",
    "Repair of a replayed step. ... <task>...</task> <step ...>...</step> <page ...>"
    "<candidate id=...>...</candidate>...</page> Answer with one JSON object ...",
]

_URL = r"(?P<url>[a-z][a-z0-9+.-]*://[^\s,]+)"
_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_NUM = r"(?P<n>\d+|" + "|".join(_NUMBER_WORDS) + r")"
_END = r"\s*(?=[.!?\n]|$)"
# A misbehaviour marker, [standin:NAME] or [standin:NAME:ARG]: the policy acts on it, the
# vocabulary reads the prompt without it.
MARKER = re.compile(r"\[standin:(?P<name>[a-z]+)(?::(?P<arg>[^\]]*))?\]", re.IGNORECASE)
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
# The careful tasks (careful.py), tried after every form above.
_ORDERS = r"newest|latest|most recent|oldest|earliest|most read|least read"
_P_RANKED = re.compile(
    rf"\bopen {_URL} and report the {_NUM} (?P<order>{_ORDERS}) (?P<things>[^.!?\n]+?){_END}",
    _FLAGS,
)
_P_EXTREME = re.compile(
    rf"\bopen {_URL} and report the (?P<thing>[\w ]+?) with the "
    rf"(?P<direction>highest|lowest|earliest|latest) (?P<field>[^.!?\n]+?){_END}",
    _FLAGS,
)
_P_LOOKUP = re.compile(
    rf"\bopen {_URL} and report the (?P<field>[\w ]+?) for (?P<key>[^.!?\n]+?){_END}", _FLAGS
)
_P_PROPERTY = re.compile(rf"\bopen {_URL} and report its (?P<field>[^.!?\n]+?){_END}", _FLAGS)
_P_ANSWER_FIELD = re.compile(r"answer with (?:its|the) (?P<field>\w+) only", _FLAGS)


def _clean(prompt: str) -> str:
    """Markers out, spaces collapsed (newlines kept: they end sentences)."""
    without = MARKER.sub("", prompt)
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


def _answer_again(prompt: str) -> AnswerAgain | None:
    context = re.search(r"Task \(for context[^)]*\): (?P<task>.+)", prompt)
    data_at = prompt.find("Today's data:")
    if context is None or data_at < 0 or "answer the task again" not in prompt.lower():
        return None
    # The compiler elides URLs; the answer never depends on them.
    task = parse_task(context["task"].replace("<url>", "http://elided.invalid"))
    replays = PickCheapest | AnswerAgain | QualityCheck | PickAgain | Verify | Compare | Heal
    if task is None or isinstance(task, replays):
        return None
    example = re.search(r"<example>\n?(?P<example>.*?)\n?</example>", prompt, re.DOTALL)
    return AnswerAgain(
        task,
        data_values(prompt[data_at + len("Today's data:") :]),
        example=example["example"] if example else "",
    )


def _pick_again(prompt: str) -> PickAgain | None:
    """A compiler's pick prompt about a careful task (the cheapest tasks' picks are
    PickCheapest's, as before)."""
    context = re.search(r"Task \(for context[^)]*\): (?P<task>.+)", prompt)
    if context is None:
        return None
    task = parse_task(context["task"].replace("<url>", "http://elided.invalid"))
    if not isinstance(task, CarefulTask):
        return None
    return pick_prompt(task, prompt)


_QUALITY = re.compile(
    r"Quality check of a replayed answer.*?<earlier_answer>\n?(?P<earlier>.*?)\n?"
    r"</earlier_answer>.*?<new_answer>\n?(?P<new>.*?)\n?</new_answer>",
    re.DOTALL,
)

Task = (
    BrowsingTask
    | CarefulTask
    | PickCheapest
    | AnswerAgain
    | QualityCheck
    | PickAgain
    | Verify
    | Compare
    | Heal
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


def _careful(text: str) -> CarefulTask | None:
    if m := _P_RANKED.search(text):
        return Ranked(_url(m), _number(m["n"]), " ".join(m["order"].lower().split()), m["things"])
    if m := _P_EXTREME.search(text):
        return Extreme(_url(m), m["thing"].strip(), m["direction"].lower(), m["field"].strip())
    if m := _P_LOOKUP.search(text):
        return Lookup(_url(m), m["field"].strip(), _unquote(m["key"]))
    if m := _P_PROPERTY.search(text):
        return Property(_url(m), m["field"].strip())
    return None


def _careful_task(task: str) -> CarefulTask | None:
    """A verified task's words as a careful task; None for any other task."""
    parsed = parse_task(task.replace("<url>", "http://elided.invalid"))
    return parsed if isinstance(parsed, CarefulTask) else None


def parse_task(prompt: str) -> Task | None:
    text = _clean(prompt)
    # First of all: a heal prompt quotes the task, and the page's texts, and the task may
    # itself be a verification or a replay prompt's words.
    if HEAL_HEAD in prompt and (heal := heal_prompt_of(prompt)):
        return heal
    # Then a verification prompt quotes the task and pages whose text may read
    # like any other prompt.
    if PROMPT_HEAD in prompt and (verify := verification_prompt_of(prompt, _careful_task)):
        return verify
    # So does a comparison prompt, with two answers.
    if COMPARISON_HEAD in prompt and (compare := comparison_prompt_of(prompt)):
        return compare
    # Before the rest: a quality-check prompt quotes the task it checks.
    if quality := _QUALITY.search(prompt):
        return QualityCheck(quality["earlier"], quality["new"])
    if again := _answer_again(prompt):
        return again
    if pick := _pick_again(prompt):
        return pick
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
    if careful := _careful(text):
        return careful
    if re.search(r"\bcheapest\b", text, _FLAGS):
        items = _json_array(MARKER.sub("", prompt))
        if items is not None:
            wanted = _P_ANSWER_FIELD.search(text)
            return PickCheapest(items, answer_field=wanted["field"] if wanted else "name")
    return None
