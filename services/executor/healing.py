"""Healing a replayed step in place: which failures a heal may repair, what it may change,
how the small model is asked, and how its answer is read and checked. Pure; the runner
makes the calls (services/runner/healing.py) and the compiler records the healed version
(apply_heal).

A step heals only by new locators for the same tool: the keys in HEALABLE_KEYS. What it
types, where it navigates, what it submits never change, and a step that fills a form is
not healed at all: a form filled into the wrong fields is a wrong action, not a repair.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from contracts.executors import ToolStep
from contracts.runs import HealedStep
from contracts.tools import Candidate, Candidates
from services.executor.drift import value_shapes
from services.executor.toolkinds import acts

# Per tool, the input keys a heal may replace (its locators).
HEALABLE_KEYS: dict[str, tuple[str, ...]] = {
    "browser_extract": ("selector", "fields"),
    "browser_click": ("selector", "text"),
    "browser_type": ("selector",),
}


def healable_tool(tool: str) -> bool:
    return tool in HEALABLE_KEYS


def apply_heal(step: ToolStep, healed: HealedStep) -> ToolStep | None:
    """`step` with the heal's new locators, and what the healed call read or acted on in
    place of what was recorded; None when the heal is not one this step may take (another
    tool, or a key outside its locators)."""
    allowed = HEALABLE_KEYS.get(step.tool)
    if allowed is None or healed.tool != step.tool or healed.step != step.index:
        return None
    if not healed.input or any(key not in allowed for key in healed.input):
        return None
    tool_input = {**step.input, **healed.input}
    # A click found by text or by selector: the heal's locator replaces the other one.
    if step.tool == "browser_click":
        for key in ("selector", "text"):
            if key not in healed.input:
                tool_input.pop(key, None)
    return msgspec.structs.replace(
        step,
        input=tool_input,
        fingerprint=healed.fingerprint if healed.fingerprint is not None else step.fingerprint,
        target=healed.target if healed.target is not None else step.target,
    )


# --- when a step may heal ----------------------------------------------------------------

# Tool error codes that say the page changed under the step (its element is gone or is
# now only a hidden copy), not that a service failed.
PAGE_CHANGED_CODES = ("element_not_found", "element_not_actionable")
# At most this many steps heal in one run: past it a full run is the better buy.
MAX_HEALS_PER_RUN = 3
HEAL_HEAD = "Repair of a replayed step."
# Bounds on what the prompt shows: the small model's reading is paid for.
MAX_CANDIDATES_SHOWN = 60
MAX_SAMPLE_CHARS = 400


def page_changed(tool: str, reason: str, *, expectation: bool) -> bool:
    """Whether a step's failure says the page changed: its element is gone, or (a read)
    what it read missed the step's expectation. `reason`: the step's failure as the
    replayer words it ("<tool>: <code>: <message>" for a tool's error)."""
    if not healable_tool(tool):
        return False
    if expectation:
        return not acts_by_key(tool)
    return any(reason.startswith(f"{tool}: {code}:") for code in PAGE_CHANGED_CODES)


def acts_by_key(tool: str) -> bool:
    """The healable tools that act: their heal must land on the same control."""
    return healable_tool(tool) and acts(tool)


# --- asking the small model --------------------------------------------------------------


def _attrs(**values: object) -> str:
    return " ".join(
        f"{name}={json.dumps(str(value), ensure_ascii=False)}"
        for name, value in values.items()
        if value not in (None, "")
    )


def _recorded_block(step: ToolStep, failure: str) -> list[str]:
    lines = [f"<step {_attrs(index=step.index, tool=step.tool)}>"]
    lines.append(f"<recorded_input>{json.dumps(step.input, ensure_ascii=False)}</recorded_input>")
    lines.append(f"<failure>{failure}</failure>")
    if step.target is not None:
        target = step.target
        lines.append(
            f"<recorded_element {_attrs(role=target.role, name=target.name, tag=target.tag)}/>"
        )
    found = step.fingerprint
    if found is not None:
        if found.headers:
            lines.append(f"<recorded_headers>{' | '.join(found.headers)}</recorded_headers>")
        if found.labels:
            labels = {k: v[:3] for k, v in found.labels.items()}
            lines.append(
                f"<recorded_labels>{json.dumps(labels, ensure_ascii=False)}</recorded_labels>"
            )
        if found.shapes:
            lines.append(
                f"<recorded_shapes>{json.dumps(found.shapes, ensure_ascii=False)}</recorded_shapes>"
            )
    if step.sample:
        sample = json.dumps(step.sample, ensure_ascii=False)[:MAX_SAMPLE_CHARS]
        lines.append(f"<recorded_sample>{sample}</recorded_sample>")
    lines.append("</step>")
    return lines


def _candidate_block(number: int, candidate: Candidate) -> str:
    attrs = _attrs(
        id=number,
        role=candidate.role,
        name=candidate.name,
        tag=candidate.tag,
        count=candidate.count if candidate.count != 1 else None,
    )
    body: dict[str, Any] = {}
    if candidate.text:
        body["text"] = candidate.text
    if candidate.parts:
        body["parts"] = candidate.parts
    if candidate.samples:
        body["samples"] = candidate.samples
    return f"<candidate {attrs}>{json.dumps(body, ensure_ascii=False)}</candidate>"


def heal_prompt(task: str, step: ToolStep, failure: str, page: Candidates) -> str:
    """What the small model is asked: the step as recorded (its input, what failed, the
    element it acted on or what its values meant and looked like) and what the page
    offers now, numbered. It answers by number: it never writes a selector of its own."""
    shown = page.candidates[:MAX_CANDIDATES_SHOWN]
    acting = acts_by_key(step.tool)
    lines = [
        f"{HEAL_HEAD} A scheduled task is answered by replaying recorded browser steps.",
        "One step failed because the page changed. Find, among the page's candidates,",
        "the one that serves the same purpose as the recorded element, or say none does.",
        f"<task>{task}</task>",
        *_recorded_block(step, failure),
        f"<page {_attrs(url=page.url, title=page.title)}>",
        *(_candidate_block(n, c) for n, c in enumerate(shown, start=1)),
        "</page>",
    ]
    if acting:
        lines += [
            'Answer with one JSON object and nothing else: {"candidate": <id>} for the',
            "control a person would use to do the same thing (same kind of control, same",
            'label or meaning), or {"candidate": null} when no candidate is surely it.',
        ]
    else:
        lines += _read_instruction(sorted(_field_names(step)))
    return "\n".join(lines)


def _read_instruction(fields: list[str]) -> list[str]:
    if not fields:
        return [
            'Answer with one JSON object and nothing else: {"candidate": <id>} for the group',
            "whose items hold the same values as the recorded sample (same kind, same",
            'meaning); {"candidate": <id>, "part": "<part>"} when the values are one part of',
            'each of its items; or {"candidate": null} when no candidate holds them.',
        ]
    mapping = ", ".join(f'"{name}": "<part>"' for name in fields)
    return [
        "Answer with one JSON object and nothing else:",
        f'{{"candidate": <id>, "fields": {{{mapping}}}}}',
        "for the group whose items hold the same values as the recorded sample (same kind,",
        "same meaning), each field mapped to the part of the candidate's items that holds",
        'it; or {"candidate": null} when no candidate does.',
    ]


def _field_names(step: ToolStep) -> dict[str, str]:
    """The extract's fields whose element a heal may move: name -> its "@attr" suffix
    ("" for its text). A field that reads an attribute of the match itself stays."""
    fields = step.input.get("fields")
    if not isinstance(fields, dict):
        return {}
    found: dict[str, str] = {}
    for name, spec in fields.items():
        if not isinstance(spec, str) or spec.startswith("@"):
            continue
        _css, at, attr = spec.partition("@")
        found[name] = f"@{attr}" if at else ""
    return found


# --- reading and checking its answer -----------------------------------------------------


@dataclass(frozen=True)
class Repair:
    """The locators a heal puts in place of the step's (HEALABLE_KEYS), and the
    candidate they came from."""

    input: dict[str, Any]
    candidate: Candidate


def _answer_object(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        found = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def read_heal(text: str, step: ToolStep, page: Candidates) -> Repair | str:
    """The repair the small model's answer picks, or why there is none (in words): no
    candidate, an answer that cannot be read, a number or part the page did not offer,
    or (an action) a control other than the recorded one (same_control)."""
    answer = _answer_object(text)
    if answer is None:
        return "the small model's answer is not a JSON object"
    number = answer.get("candidate")
    if number is None:
        return "the small model found no candidate for the step"
    shown = page.candidates[:MAX_CANDIDATES_SHOWN]
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= len(shown):
        return f"the small model picked {number!r}, which is no candidate's number"
    candidate = shown[number - 1]
    if acts_by_key(step.tool):
        refused = same_control(step, candidate)
        if refused is not None:
            return refused
        return Repair(input={"selector": candidate.selector}, candidate=candidate)
    return _read_repair(answer, step, candidate)


def _read_repair(answer: dict[str, Any], step: ToolStep, candidate: Candidate) -> Repair | str:
    wanted = _field_names(step)
    if not wanted:
        part = answer.get("part")
        if part is None:
            return Repair(input={"selector": candidate.selector}, candidate=candidate)
        if not isinstance(part, str) or part not in candidate.parts:
            return f"the small model picked part {part!r}, no part of the candidate"
        return Repair(input={"selector": within(candidate.selector, part)}, candidate=candidate)
    given = answer.get("fields")
    if not isinstance(given, dict):
        return "the small model mapped none of the step's fields"
    recorded = step.input.get("fields")
    assert isinstance(recorded, dict)  # _field_names found fields
    fields = dict(recorded)
    for name, suffix in wanted.items():
        part = given.get(name)
        if not isinstance(part, str) or part not in candidate.parts:
            return f"the small model mapped field {name!r} to {part!r}, no part of the candidate"
        fields[name] = part + suffix
    return Repair(input={"selector": candidate.selector, "fields": fields}, candidate=candidate)


def within(group: str, part: str) -> str:
    """One selector for a part of every item of a group: a part written from the item
    (":scope > h3 > a") hangs from the group's selector, any other descends from it."""
    if part.startswith(":scope"):
        return group + part.removeprefix(":scope")
    return f"{group} {part}"


def plain_name(text: str) -> str:
    """A control's name as compared: case, punctuation and spacing set aside."""
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


_NOT_WORD = re.compile(r"[^\w]+")


def same_control(step: ToolStep, candidate: Candidate) -> str | None:
    """Why `candidate` is not surely the control the step acted on (None: it is): an
    action heals only onto an element of the same role whose name says the same, and
    only one element. A step recorded without its element's role and name heals only
    when it clicked by text: that text is the name, and a link or button the role."""
    recorded = step.target
    if recorded is None or not recorded.name:
        text = step.input.get("text")
        if step.tool != "browser_click" or not isinstance(text, str):
            return "the recorded control's role and name are unknown: an action is not guessed"
        role, name = "", text
    else:
        role, name = recorded.role, recorded.name
    if candidate.count != 1:
        return f"candidate {candidate.selector!r} is not one element"
    if role and candidate.role != role:
        return f"the candidate is a {candidate.role or 'element'}, the recorded control a {role}"
    if not role and candidate.role not in ("link", "button"):
        return f"the candidate is a {candidate.role or 'element'}, not a link or button"
    if not plain_name(name) or plain_name(candidate.name) != plain_name(name):
        return f"the candidate is named {candidate.name!r}, the recorded control {name!r}"
    return None


def values_alike(step: ToolStep, output: Any) -> str | None:
    """Why what a healed read yields does not look like what the step read when it was
    recorded (None: it does): the same kind of items (text, or objects with the same
    fields), and per field values of a shape the recording had."""
    if not isinstance(output, list) or not output:
        return "the healed read found nothing"
    if step.sample:
        was, now = step.sample[0], output[0]
        if isinstance(was, dict) != isinstance(now, dict):
            return "the healed read yields another kind of item"
        if isinstance(was, dict) and set(was) != set(now):
            return "the healed read yields items with other fields"
    shapes = step.fingerprint.shapes if step.fingerprint is not None else {}
    for field, recorded in shapes.items():
        values = [item.get(field) if isinstance(item, dict) else item for item in output]
        now = set(value_shapes(values))
        if recorded and now and not now & set(recorded):
            shown = ", ".join(sorted(now)[:3])
            return (
                f"the healed read's {field or 'values'} look like {shown}, not like {recorded[0]}"
            )
    return None


def named_exactly(step: ToolStep, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A replayed click by text on the control it was recorded on: when the recorded
    control's name is the text, a control whose name merely contains it ("Sports
    betting" for "Sports") is another one, so the click asks for the name exactly
    (browser_click `exact`); a missing control then heals, or falls back, instead."""
    text = tool_input.get("text")
    target = step.target
    if step.tool != "browser_click" or not isinstance(text, str) or target is None:
        return tool_input
    if not text.strip() or plain_name(target.name) != plain_name(text):
        return tool_input
    return {**tool_input, "exact": True}
