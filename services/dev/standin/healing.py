"""Item 19 of the policy's vocabulary: rote's heal prompt (services/executor/healing.py
`heal_prompt`), answered as a careful small model would, from what the prompt shows.

The prompt is read into a `Heal`: the step as recorded (its input, the element an action
was done on, the headers, labels, shapes and sample of what a read held) and the page's
numbered candidates. Then:

- an action (browser_click, browser_type) picks the candidate of the recorded role named
  like the recorded control (case, punctuation and spacing set aside). Failing that it
  does what a small model does: it picks the candidate of that role sharing the most
  words with the recorded name, a plausible look-alike that rote's guard (same_control)
  must refuse. A click recorded by its text alone looks for a link or button named so.
  A control recorded with no name is not guessed at.
- a read (browser_extract) picks the group whose items hold the same kind of values:
  each recorded field maps to a distinct part of the group whose text has a value shape
  the field had (drift.value_shape), the part most like the field's name, label and
  recorded selector winning among several; a field read from an attribute of an element
  another field reads follows that field's part. Of the groups that fit, the one sharing
  most words with the recorded sample (the same items seen again), then the best-named
  parts, then the count nearest the sample's, then the first. A read of plain texts
  takes the group whose samples have the recorded shapes; when those shapes tell
  nothing (all words), it must share words with the recorded sample.

Nothing fitting is {"candidate": null}. The reply is the JSON object the prompt asks for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from services.dev.standin.conversation import Answer, Decision, Step
from services.executor.drift import TEXT_SHAPE, value_shape
from services.executor.healing import HEAL_HEAD, plain_name

# --- reading the prompt -------------------------------------------------------------------


@dataclass(frozen=True)
class Offered:
    """One <candidate> line: its number and what the page shows of it."""

    number: int
    role: str = ""
    name: str = ""
    tag: str = ""
    count: int = 1
    text: str = ""
    parts: dict[str, str] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Heal:
    """19. A heal prompt: the step as recorded and the page's candidates."""

    tool: str
    recorded_input: dict[str, Any]
    role: str = ""  # of the recorded element ("" when none was recorded)
    name: str = ""
    headers: tuple[str, ...] = ()
    labels: dict[str, list[Any]] = field(default_factory=dict)
    shapes: dict[str, list[str]] = field(default_factory=dict)
    sample: list[Any] = field(default_factory=list)
    candidates: tuple[Offered, ...] = ()
    tools: frozenset[str] = field(default_factory=frozenset)

    def next(self, steps: tuple[Step, ...]) -> Decision:
        return Answer(json.dumps(answer(self), ensure_ascii=False))


# An attribute's value, a JSON string: the prompt writes them so (and a tag with none as
# "<page >").
_VALUE = r'"(?:[^"\\\n]|\\.)*"'
_ATTR = re.compile(rf"\s*(?P<name>\w+)=(?P<value>{_VALUE})")
# The step and page blocks follow the quoted task; the task is the user's text and may
# read like anything, so the blocks are found by their own well-formed lines after it.
_BLOCKS = re.compile(
    rf"</task>\n<step(?P<step>(?: +\w+={_VALUE})*) *>\n(?P<body>.*?)\n</step>\n"
    rf"<page(?: +\w+={_VALUE})* *>\n(?P<candidates>.*?)^</page>$",
    re.DOTALL | re.MULTILINE,
)
_FAILURE_END = "</failure>"
_DECODER = json.JSONDecoder()


def _attrs(text: str, at: int = 0) -> tuple[dict[str, str], int]:
    """The name="value" attributes from `at` (values JSON-escaped, as the prompt writes
    them) and where they end."""
    found: dict[str, str] = {}
    while m := _ATTR.match(text, at):
        try:
            found[m["name"]] = json.loads(m["value"])
        except ValueError:
            break
        at = m.end()
    return found, at


def _line(body: str, tag: str) -> str | None:
    """The content of a one-line <tag>...</tag> element of the step block."""
    m = re.search(rf"^<{tag}>(?P<content>.*)</{tag}>$", body, re.MULTILINE)
    return None if m is None else m["content"]


def _json_or(raw: str | None, default: Any) -> Any:
    if raw is None:
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default


def _skip(raw: str, at: int, chars: str = " ,\n") -> int:
    while at < len(raw) and raw[at] in chars:
        at += 1
    return at


def _partial_object(raw: str, at: int) -> dict[str, Any]:
    """The whole key/value pairs of an object cut short at the end of `raw`."""
    found: dict[str, Any] = {}
    while True:
        try:
            key, at = _DECODER.raw_decode(raw, _skip(raw, at))
            at = _skip(raw, at, " ")
            if not isinstance(key, str) or not raw.startswith(":", at):
                return found
            value, at = _DECODER.raw_decode(raw, _skip(raw, at + 1, " "))
        except ValueError:
            return found
        found[key] = value


def read_sample(raw: str | None) -> list[Any]:
    """The recorded sample, which the prompt cuts at a length, not at an item: the
    items it shows whole, and the whole fields of an object cut short."""
    if raw is None:
        return []
    whole = _json_or(raw, [])
    if whole or not raw.startswith("["):
        return whole
    items: list[Any] = []
    at = 1
    while (at := _skip(raw, at)) < len(raw):
        try:
            item, at = _DECODER.raw_decode(raw, at)
        except ValueError:
            if raw.startswith("{", at) and (partial := _partial_object(raw, at + 1)):
                items.append(partial)
            break
        items.append(item)
    return items


def _candidate(line: str) -> Offered | None:
    if not line.startswith("<candidate "):
        return None
    attrs, at = _attrs(line, len("<candidate"))
    if not line.startswith(">", at) or not attrs.get("id", "").isdigit():
        return None
    try:
        body, end = _DECODER.raw_decode(line, at + 1)
    except ValueError:
        return None
    if not isinstance(body, dict) or line[end:] != "</candidate>":
        return None
    parts, samples = body.get("parts", {}), body.get("samples", [])
    count = attrs.get("count", "1")
    return Offered(
        number=int(attrs["id"]),
        role=attrs.get("role", ""),
        name=attrs.get("name", ""),
        tag=attrs.get("tag", ""),
        count=int(count) if count.isdigit() else 1,
        text=str(body.get("text", "")),
        parts={str(k): str(v) for k, v in parts.items()} if isinstance(parts, dict) else {},
        samples=[str(s) for s in samples] if isinstance(samples, list) else [],
    )


def heal_prompt_of(prompt: str) -> Heal | None:
    """The heal prompt's parts, or None when `prompt` is not one."""
    start = prompt.find(HEAL_HEAD)
    if start < 0:
        return None
    found = _BLOCKS.search(prompt, start)
    if found is None:
        return None
    step, _ = _attrs(found["step"])
    body = found["body"]
    recorded_input = _json_or(_line(body, "recorded_input"), {})
    # What follows the failure is read after it: its message is the page's or a tool's.
    after = body[body.find(_FAILURE_END) + len(_FAILURE_END) :] if _FAILURE_END in body else body
    element = re.search(r"^<recorded_element(?P<attrs>.*)/>$", after, re.MULTILINE)
    target = _attrs(element["attrs"])[0] if element else {}
    headers = re.search(
        r"^<recorded_headers>(?P<h>.*?)</recorded_headers>$", after, re.DOTALL | re.MULTILINE
    )
    candidates = (_candidate(line) for line in found["candidates"].splitlines())
    return Heal(
        tool=step.get("tool", ""),
        recorded_input=recorded_input,
        role=target.get("role", ""),
        name=target.get("name", ""),
        headers=tuple(headers["h"].split(" | ")) if headers else (),
        labels=_json_or(_line(after, "recorded_labels"), {}),
        shapes=_json_or(_line(after, "recorded_shapes"), {}),
        sample=read_sample(_line(after, "recorded_sample")),
        candidates=tuple(c for c in candidates if c is not None),
    )


# --- words --------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")
_PSEUDO = re.compile(r"::?[\w-]+(?:\([^)]*\))?")
# Words too common to say two texts are about the same things.
_COMMON = frozenset({
    "the", "and", "for", "with", "from", "that", "this", "are", "was", "were", "has", "have",
    "its", "our", "your", "you", "not", "but", "all", "new", "more", "read", "can", "will",
})  # fmt: skip


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def words(texts: Iterable[str]) -> set[str]:
    """The telling words of texts: no figures, no short or common words."""
    found = set()
    for text in texts:
        for word in _WORD.findall(text.casefold()):
            if len(word) >= 3 and not word.isdigit() and word not in _COMMON:
                found.add(_stem(word))
    return found


def selector_words(css: str) -> set[str]:
    """The names in a CSS selector (tags, classes, ids), its pseudo-classes left out:
    "td:nth-child(2)" says td, not which column."""
    return {_stem(w) for w in _WORD.findall(_PSEUDO.sub(" ", css).casefold())}


def _strings(values: Iterable[Any]) -> list[str]:
    found: list[str] = []
    for value in values:
        if isinstance(value, dict):
            found += _strings(value.values())
        elif isinstance(value, str):
            found.append(value)
    return found


# --- the answer ---------------------------------------------------------------------------

ACTING_TOOLS = ("browser_click", "browser_type")


def answer(heal: Heal) -> dict[str, Any]:
    if heal.tool in ACTING_TOOLS:
        return {"candidate": pick_control(heal)}
    return pick_group(heal)


def pick_control(heal: Heal) -> int | None:
    """The number of the control a person would use to do the same thing: named like
    the recorded one, else (a small model's slip) the one of its role sharing the most
    words with its name; None when none shares a word."""
    name, role = heal.name, heal.role
    text = heal.recorded_input.get("text")
    if not plain_name(name):
        if heal.tool != "browser_click" or not isinstance(text, str) or not plain_name(text):
            return None  # nothing says which control it was
        name, role = text, ""
    roles = (role,) if role else ("link", "button")
    same_kind = [c for c in heal.candidates if c.role in roles]
    exact = [c for c in same_kind if plain_name(c.name) == plain_name(name)]
    if exact:
        # One element before a group of them: an action is done on one control.
        return min(exact, key=lambda c: (c.count != 1, c.number)).number
    wanted = set(plain_name(name).split())

    def shared(c: Offered) -> int:
        return len(wanted & set(plain_name(c.name).split()))

    best = max(same_kind, key=lambda c: (shared(c), -c.number), default=None)
    return best.number if best is not None and shared(best) > 0 else None


@dataclass(frozen=True)
class Field:
    """A recorded field a heal may move: its name, recorded css, "@attr" suffix ("" for
    its text), the shapes its values had and the words that name it."""

    name: str
    css: str
    suffix: str
    shapes: frozenset[str]
    naming: frozenset[str]


def movable_fields(heal: Heal) -> list[Field]:
    """The extract's fields whose element may move (a field reading an attribute of the
    match itself stays): the fields the prompt asks to map."""
    fields = heal.recorded_input.get("fields")
    if not isinstance(fields, dict):
        return []
    found = []
    for name, spec in sorted(fields.items()):
        if not isinstance(spec, str) or spec.startswith("@"):
            continue
        css, at, attr = spec.partition("@")
        values = [item.get(name) for item in heal.sample if isinstance(item, dict)]
        shapes = {value_shape(v) for v in values if isinstance(v, str)}
        shapes |= set(heal.shapes.get(name, []))
        labels = [str(lb) for lb in heal.labels.get(name, [])[:1] if lb]
        found.append(
            Field(
                name,
                css.strip(),
                f"@{attr}" if at else "",
                frozenset(shapes - {""}),
                frozenset(words([name.replace("_", " "), *labels]) | selector_words(name)),
            )
        )
    return found


def likeness(f: Field, part: str, text: str) -> int:
    """How much a part looks like the field: its naming words (name, label) in the part's
    selector or text count double; the recorded selector's names in the part's count once."""
    named = selector_words(part) | words([text])
    return 2 * len(f.naming & named) + len(selector_words(f.css) & selector_words(part))


def _options(f: Field, parts: dict[str, str]) -> list[str]:
    """The parts that could hold the field, the likest first. A text field's part must
    show a value of a shape it had (any part when nothing was recorded); an attribute's
    part shows its text, not the attribute, so it must look like the field instead."""
    if f.suffix:
        fitting = [p for p in parts if likeness(f, p, "") > 0]
    else:
        fitting = [p for p in parts if not f.shapes or value_shape(parts[p]) in f.shapes]
    order = list(parts)
    return sorted(fitting, key=lambda p: (-likeness(f, p, parts[p]), order.index(p)))


# Tries of the mapping search per candidate: past it a small model gives up on it too.
MAX_TRIES = 2000


def map_fields(fields: list[Field], parts: dict[str, str]) -> dict[str, str] | None:
    """Each field mapped to a part, no two fields to the same element read the same way,
    or None. An attribute recorded on a text field's element follows that field."""
    texts = {f.css: f.name for f in fields if not f.suffix}
    followers = [f for f in fields if f.suffix and f.css in texts]
    searched = [f for f in fields if f not in followers]
    options = {f.name: _options(f, parts) for f in searched}
    # The fields with fewest options first: a forced choice is made before a free one.
    searched.sort(key=lambda f: (len(options[f.name]), f.name))
    mapping: dict[str, str] = {}
    tries = [0]

    def search(i: int, used: set[str]) -> bool:
        if i == len(searched):
            return True
        f = searched[i]
        for part in options[f.name]:
            tries[0] += 1
            if tries[0] > MAX_TRIES:
                return False
            if part + f.suffix in used:
                continue
            mapping[f.name] = part
            if search(i + 1, used | {part + f.suffix}):
                return True
        mapping.pop(f.name, None)
        return False

    if not search(0, set()):
        return None
    for f in followers:
        mapping[f.name] = mapping[texts[f.css]]
    specs = [mapping[f.name] + f.suffix for f in fields]
    return mapping if len(set(specs)) == len(specs) else None


def _shown_texts(heal: Heal) -> list[str]:
    """The recorded sample's texts a page shows as text: not what a field read from an
    attribute (a URL, an id), which no candidate shows."""
    fields = heal.recorded_input.get("fields")
    if not isinstance(fields, dict):
        return _strings(heal.sample)
    texts = {n for n, spec in fields.items() if isinstance(spec, str) and "@" not in spec}
    return _strings(
        {k: v for k, v in item.items() if k in texts}
        for item in heal.sample
        if isinstance(item, dict)
    )


def _seen(c: Offered) -> list[str]:
    return [*c.samples, *c.parts.values(), c.text]


def _plain_fit(heal: Heal, c: Offered, recorded_words: set[str]) -> bool:
    """Whether a group of texts holds what the plain read held: its samples of the
    recorded shapes, and words in common when the shapes are only words."""
    shown = c.samples or ([c.text] if c.text else [])
    now = {value_shape(s) for s in shown} - {""}
    was = {value_shape(s) for s in _strings(heal.sample)} | set(heal.shapes.get("", []))
    was -= {""}
    if not now or (was and not now <= was):
        return False
    if was <= {TEXT_SHAPE}:
        return bool(recorded_words & words(_seen(c)))
    return True


def _decorated(heal: Heal, c: Offered) -> bool:
    """Whether every item shows a part's text that none of the recorded values held (a
    "More inside.", a "Read more"): the whole item is more than the values."""
    recorded = " ".join(_strings(heal.sample)).casefold()
    for text in c.parts.values():
        shown = " ".join(text.split()).casefold()
        if shown and shown not in recorded and all(shown in s.casefold() for s in c.samples):
            return True
    return False


def _nearer(heal: Heal, part_text: str, c: Offered) -> bool:
    """Whether the part's text is nearer the recorded values' length than the whole
    item's: a headline and its "More inside." are more than the headline."""
    recorded = [len(text) for text in _strings(heal.sample)]
    if not recorded or not c.samples:
        return True
    mean = sum(recorded) / len(recorded)
    return abs(len(part_text) - mean) <= abs(len(c.samples[0]) - mean)


def _plain_part(heal: Heal, c: Offered, recorded_words: set[str]) -> str | None:
    """The part of a group's items that holds what the plain read held, or None: its
    text (the first item's, all the prompt shows of it) of a recorded shape, and the
    group's items sharing words with the recorded values. Of several, the one whose
    text shares the most words, then the first."""
    if not recorded_words & words(_seen(c)):
        return None
    best: tuple[int, str] | None = None
    for part, text in c.parts.items():
        one = Offered(number=c.number, count=c.count, samples=[text])
        # Shapes from the part, words from the whole group.
        if not _plain_fit(heal, one, recorded_words | words([text])):
            continue
        shared = len(recorded_words & words([text]))
        if best is None or shared > best[0]:
            best = (shared, part)
    return best[1] if best is not None else None


def _tag_words(c: Offered) -> set[str]:
    """What the prompt shows of a group's own selector: its tag only (a candidate is
    shown by number, never by selector). A list kept as a list is a faint cue."""
    return {c.tag.casefold()} if c.tag else set()


def pick_group(heal: Heal) -> dict[str, Any]:
    """The group holding the same kind of values as the recorded read, and (with fields)
    the part each field maps to; {"candidate": None} when none does."""
    fields = movable_fields(heal)
    recorded_words = words(_shown_texts(heal))
    selector = heal.recorded_input.get("selector")
    recorded_css = selector_words(selector) if isinstance(selector, str) else set()
    best: tuple[tuple[int, ...], dict[str, Any]] | None = None
    for c in heal.candidates:
        if fields:
            mapping = map_fields(fields, c.parts) if c.parts else None
            if mapping is None:
                continue
            named = sum(likeness(f, mapping[f.name], c.parts[mapping[f.name]]) for f in fields)
            reply: dict[str, Any] = {"candidate": c.number, "fields": mapping}
        else:
            # The values may be one part of each item now (a headline inside a card):
            # the part, when every item also shows text the values never held (a
            # teaser) or the part is as long as the values were.
            part = _plain_part(heal, c, recorded_words)
            if part is not None and (
                _decorated(heal, c)
                or _nearer(heal, c.parts[part], c)
                or not _plain_fit(heal, c, recorded_words)
            ):
                named, reply = 0, {"candidate": c.number, "part": part}
            elif _plain_fit(heal, c, recorded_words):
                named, reply = 0, {"candidate": c.number}
            else:
                continue
        rank = (
            len(recorded_words & words(_seen(c))),
            named + len(recorded_css & _tag_words(c)),
            -abs(c.count - len(heal.sample)),
            -c.number,
        )
        if best is None or rank > best[0]:
            best = (rank, reply)
    return best[1] if best is not None else {"candidate": None}
