"""Where each value a run used came from: the data-flow half of the compiler.

For a string in a step's input (or the run's answer) the question is what produced it:
  constant   the task prompt, the model's own earlier input, or a stable choice of how
             (a selector, a URL, a UI label): replayed as recorded;
  template   an earlier step's output, found by exact string match against list items
             and object fields (or embedded in a longer string: a relative href behind a
             constant origin, extracted headlines inside an answer): becomes references;
             text several items of a list hold ("Operational") reads the item its
             neighbouring references read ("Web app: Operational"), else it is a
             judgement (`bind`);
  judgement  content that changes between runs, picked or rewritten in a way no rule
             expresses: the small model decides again on replay.

What the model wrote before a call (`model_text`, thinking) is never consulted: "Let me
open the page" is not reasoning about data. The run's answer is a data value with one
more rule: once the run read content (a page, a file, a command's output), an answer
made of the prompt's words may still be the run's verdict on it ("No service is down."),
and is then a judgement (`answer_provenance`).

Picking items from a list is a rule only when the positions explain themselves: the
first, the last, an ordinal the prompt names, or the first k in order (top-k); a task
prompt that asks for a judgement (cheapest, best, most relevant...) makes every pick a
judgement, and using every item of a list is a rule only when its length is fixed. A
single item picked by judgement stays a template whose pointer goes through a *pick*
(compile.py asks the small model for that item's field); other judgements are redone
whole by the small model.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar
from urllib.parse import urljoin

from services.compiler import references
from services.compiler.references import Path
from services.compiler.toolkinds import Kind

# Letters and digits of any script (\w without "_", so snake_case splits into words).
_TOKEN = re.compile(r"[^\W_]+")
# Scripts written without spaces between words, where one or two characters are a word.
_DENSE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def tokens(text: str) -> set[str]:
    """Words of 3+ characters (any length in Chinese, Japanese or Korean) and every
    number, casefolded: what content is made of."""
    return {
        t
        for t in _TOKEN.findall(text.casefold())
        if len(t) >= 3 or t.isdecimal() or _DENSE.search(t)
    }


def words(text: str) -> set[str]:
    """Every word and number, casefolded, short ones too: "no", "up" and "ok" are what a
    verdict is made of."""
    return set(_TOKEN.findall(text.casefold()))


# --- sources: earlier outputs a value may come from -------------------------------------


@dataclass(frozen=True)
class Source:
    step: int  # position of the step in the trace
    tool: str
    output: Any
    leaves: tuple[tuple[Path, str], ...]
    tokens: frozenset[str]
    reads: bool  # its output is content: a page, a file, a command's output
    numbers: frozenset[str] = frozenset()  # leaves that are a number and nothing else

    @classmethod
    def of(cls, step: int, tool: str, output: Any, *, reads: bool) -> Source:
        leaves = tuple(references.leaves(output))
        words: set[str] = set()
        for _, leaf in leaves:
            words |= tokens(leaf)
        numbers = frozenset(leaf.strip() for _, leaf in leaves if leaf.strip().isdecimal())
        return cls(step, tool, output, leaves, frozenset(words), reads, numbers)


@dataclass(frozen=True)
class Pointer:
    """A path into the output of the trace step at position `step`."""

    step: int
    path: Path


@dataclass(frozen=True)
class Template:
    """A string split into literal text and pointers to earlier outputs. `open` holds the
    parts whose text several items of one list hold ("Operational" is the state of three
    components): (the part's index, a pointer into each of those items); the part's
    pointer is the first until `bind` decides which item it is."""

    parts: tuple[str | Pointer, ...]
    open: tuple[tuple[int, tuple[Pointer, ...]], ...] = ()

    @property
    def exact(self) -> bool:
        return len(self.parts) == 1 and isinstance(self.parts[0], Pointer)

    @property
    def pointers(self) -> list[Pointer]:
        return [p for p in self.parts if isinstance(p, Pointer)]

    @property
    def literal(self) -> str:
        return " ".join(p for p in self.parts if isinstance(p, str))

    def with_pointers(self, rewrite: Mapping[Pointer, Pointer]) -> Template:
        return Template(
            tuple(rewrite.get(p, p) if isinstance(p, Pointer) else p for p in self.parts)
        )


ProvenanceKind = Literal["constant", "template", "judgement"]


@dataclass(frozen=True)
class Provenance:
    kind: ProvenanceKind
    why: str
    template: Template | None = None
    sources: tuple[int, ...] = ()  # trace positions whose outputs the value depends on
    choice: bool = False  # a pointer into a list the prompt's alternatives choose from


@dataclass
class Context:
    """What is constant for the task: its prompt and the model's own constant inputs."""

    prompt: str
    constants: set[str] = field(default_factory=set)
    constant_tokens: set[str] = field(default_factory=set)
    constant_words: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.prompt_tokens = tokens(self.prompt)
        self.prompt_words = words(self.prompt)

    def add_constant(self, value: str) -> None:
        self.constants.add(value)
        self.constant_tokens |= tokens(value)
        self.constant_words |= words(value)

    @property
    def allowed_tokens(self) -> set[str]:
        return self.prompt_tokens | self.constant_tokens

    @property
    def allowed_words(self) -> set[str]:
        return self.prompt_words | self.constant_words


def _bounded(text: str, start: int, end: int) -> bool:
    """The match does not cut a word in two."""
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if text[start].isalnum() and before.isalnum():
        return False
    return not (text[end - 1].isalnum() and after.isalnum())


def _named(text: str, value: str) -> bool:
    """Does `text` name `value` as a whole: not inside a longer word ("Tom" in "bottom")
    nor a dotted or dashed token ("1" in "127.0.0.1", "Jean" in "Jean-Luc")?"""
    if not value:
        return False
    joiner = r"[.,:/@-]"
    left = rf"(?<!\w)(?<!\w{joiner})" if value[0].isalnum() else ""
    right = rf"(?!\w)(?!{joiner}\w)" if value[-1].isalnum() else ""
    return re.search(left + re.escape(value) + right, text, re.IGNORECASE) is not None


def _item(pointer: Pointer) -> tuple[int, Path, int] | None:
    """(step, list path, index): the list item `pointer` goes into, if any."""
    position = list_position(pointer.path)
    return None if position is None else (pointer.step, *position)


def _occurrences(source: Source, leaf: str) -> tuple[Pointer, ...]:
    return tuple(Pointer(source.step, path) for path, held in source.leaves if held == leaf)


def _several_items(pointers: Sequence[Pointer]) -> bool:
    """Do these pointers go into two or more list items (so which one is meant matters)?"""
    return len({item for p in pointers if (item := _item(p)) is not None}) > 1


def find_exact(value: str, sources: Sequence[Source], ctx: Context) -> Template | None:
    """The latest earlier output holding exactly `value`. A short value ("1", "OK") is
    too common to say where it came from: it is not matched. Where several items of a
    list hold it, the template is open (`Template.open`)."""
    if value in ctx.constants or not _embeddable(value, "data"):
        return None
    for source in reversed(sources):
        found = _occurrences(source, value)
        if found:
            return Template((found[0],), ((0, found),) if _several_items(found) else ())
    return None


def _embeddable(leaf: str, kind: Kind) -> bool:
    """Can this output string stand inside a longer value? Short words would match by
    accident: in text, 3+ characters (2 with a digit); in a URL or command, only
    path- or URL-like strings or long ones."""
    if not any(ch.isalnum() for ch in leaf):
        return False
    if kind == "data":
        return len(leaf) >= 3 or (len(leaf) == 2 and any(ch.isdigit() for ch in leaf))
    return len(leaf) >= 8 or (len(leaf) >= 3 and ("/" in leaf or "?" in leaf))


def find_template(
    value: str, sources: Sequence[Source], ctx: Context, kind: Kind = "data"
) -> Template | None:
    """Split `value` into literal text and earlier output strings found inside it
    (whole words only, latest step first). Where matches overlap, what a read found
    wins over what a navigation reported, then the longer one: in `origin/` + `/s/a`
    the page URL `origin/` is longer, but the extracted href is the data the run
    picked, and taking the URL would leave `s/a` a constant."""
    found: dict[str, tuple[Pointer, ...]] = {}  # every occurrence, in the latest output
    read: set[str] = set()
    for source in reversed(sources):
        for _, leaf in source.leaves:
            if (
                leaf in found
                or leaf == value
                or leaf in ctx.constants
                or leaf not in value
                or not _embeddable(leaf, kind)
            ):
                continue
            found[leaf] = _occurrences(source, leaf)
            if source.reads:
                read.add(leaf)
    if not found:
        return None
    taken: list[tuple[int, int, tuple[Pointer, ...]]] = []
    for leaf in sorted(found, key=lambda s: (s not in read, -len(s), s)):
        start = value.find(leaf)
        while start != -1:
            end = start + len(leaf)
            if _bounded(value, start, end) and all(end <= a or start >= b for a, b, _ in taken):
                taken.append((start, end, found[leaf]))
            start = value.find(leaf, start + 1)
    if not taken:
        return None
    taken.sort(key=lambda t: t[0])
    parts: list[str | Pointer] = []
    open_parts: list[tuple[int, tuple[Pointer, ...]]] = []
    cursor = 0
    for start, end, pointers in taken:
        if start > cursor:
            parts.append(value[cursor:start])
        if _several_items(pointers):
            open_parts.append((len(parts), pointers))
        parts.append(pointers[0])
        cursor = end
    if cursor < len(value):
        parts.append(value[cursor:])
    return Template(tuple(parts), tuple(open_parts))


def _link_like(leaf: str) -> bool:
    return (
        1 < len(leaf) <= 2048
        and not any(ch.isspace() for ch in leaf)
        and ("/" in leaf or leaf.startswith(("?", "#")))
    )


def resolved_link(
    value: str, sources: Sequence[Source], ctx: Context, template: Template | None
) -> Pointer | None:
    """A link a read found that, resolved against a page the run was on, is exactly the
    URL `value` while no reference points at a read: `../s/a` behind a page URL cannot
    be written as text around a reference, but the URL is still that link, so it is
    not a constant (nor the page URL plus leftover text)."""
    if template is not None and any(
        s.reads and s.step == p.step for p in template.pointers for s in sources
    ):
        return None
    bases = {c for c in ctx.constants if "://" in c}
    bases |= {leaf for s in sources if not s.reads for _, leaf in s.leaves if "://" in leaf}
    if not bases:
        return None
    for source in reversed(sources):
        if not source.reads:
            continue
        for path, leaf in source.leaves:
            if (
                _link_like(leaf)
                and leaf not in ctx.constants
                and any(urljoin(base, leaf) == value for base in sorted(bases))
            ):
                return Pointer(source.step, path)
    return None


# A number that numbers a line or a list item ("1. ", "2) ", "#3 "): at the start of a
# line, or after a colon, comma or semicolon ("Deals: 1) Alpha, 2) Beta"). The answer's
# form, not data.
_NUMBER_MARK = r"(?:\d+[.)](?=\s|$)|#\d+(?!\w))"
_LINE_NUMBER = re.compile(rf"^[ \t]*{_NUMBER_MARK}")
_ITEM_NUMBER = re.compile(rf"(?<=[:,;])[ \t]*{_NUMBER_MARK}")


def _form_text(template: Template) -> str:
    """The template's literal text without the numbers that number its lines or items."""
    out: list[str] = []
    for n, part in enumerate(template.parts):
        if isinstance(part, Pointer):
            continue
        lines = part.split("\n")
        # The first line of text after a reference does not start a line.
        first = 1 if n > 0 and isinstance(template.parts[n - 1], Pointer) else 0
        lines[first:] = [_LINE_NUMBER.sub(" ", line, count=1) for line in lines[first:]]
        out.append("\n".join(_ITEM_NUMBER.sub(" ", line) for line in lines))
    return " ".join(out)


def leaked_content(
    template: Template, sources: Sequence[Source], ctx: Context
) -> tuple[str, tuple[int, ...]] | None:
    """Does the literal text of a template still carry data? A word that the task prompt
    does not have but an earlier read found on the page, or a number that does not
    number a line ("1. ") and is neither the prompt's ("top three") nor the count of the
    references ("Top 3" before three), means the text is more than its references. A
    number an output holds as a whole value is data wherever else it appears ("first 3",
    "127.0.0.1"): "(3 left)" is that item's stock. Returns why, and every step whose
    output holds such a word or number: the small model must see them to write the text
    again (a number from nowhere, a count or a sum, adds none)."""
    allowed = ctx.allowed_tokens
    counts = numbers(ctx.prompt) | {len(template.pointers)}
    why: str | None = None
    steps: set[int] = set()
    for token in sorted(tokens(_form_text(template))):
        number = token.isdecimal()
        held = [s.step for s in sources if token in s.numbers] if number else []
        fixed = token in allowed or (number and len(token) < 7 and int(token) in counts)
        if fixed and not held:
            continue
        found = sorted({*held, *(s.step for s in sources if s.reads and token in s.tokens)})
        if not number and not found:
            continue  # a word of the model's own phrasing
        steps.update(found)
        if why is None:
            where = f"from the content of step {found[-1]}" if found else "from no reference"
            why = (
                f"the text has the number {token} {where}"
                if number
                else f"the text has {token!r} {where}"
            )
    if why is None:
        return None
    return why, tuple(sorted(steps))


# --- alternatives the prompt names ------------------------------------------------------

# A sentence ends at . ; ! ? followed by a space (not inside a URL) or at a line break.
_SENTENCE = re.compile(r"(?:[^.;!?\n]|[.;!?](?=\S))+")
_PROMPT_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_CONDITION = re.compile(r"\b(?:if|when|whenever|unless|whether)\b", re.IGNORECASE)
_OTHERWISE = re.compile(r"\b(?:otherwise|else|if not)\b", re.IGNORECASE)
# A branch is the value right beside its condition: "yes if ...", "otherwise no",
# "else report ALERT" (at most two words between), not a search term further off.
_BRANCH_BEFORE = re.compile(r"^\W*(?:\w+\W+){0,2}?(?:if|when|whenever|unless)\b", re.I)
_BRANCH_AFTER = re.compile(r"\b(?:otherwise|else|if not)\W+(?:\w+\W+){0,2}$", re.I)
_WORD = r"[\w$\u00a3\u20ac%.+-]+"
_OPTION_AFTER = re.compile(
    rf"^(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)"
    rf"[\"'\u2018\u201c]?(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})",
    re.IGNORECASE,
)
_OPTION_BEFORE = re.compile(
    rf"(?P<words>{_WORD}(?:\s+{_WORD}){{0,2}})[\"'\u2019\u201d]?"
    rf"(?P<sep>\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or|nor)\s+|\s*/\s*)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Alternatives:
    """How the prompt offers `value` as one option among others, in one sentence."""

    either: tuple[str, ...] = ()  # options joined to it by "or" / "/": a choice by itself
    listed: tuple[str, ...] = ()  # options joined by commas or "and": a choice only
    #                               when a judgement word governs the list ("the cheapest")
    conditional: bool = False  # "yes if ..., otherwise no": a verdict between branches
    judgement: str | None = None  # a judgement word in the same sentence


def _phrases(words: str, *, from_end: bool) -> list[str]:
    """The 1-, 2- and 3-word phrases next to a separator: "cost of Gadget" may be the
    option "Gadget"."""
    parts = words.split()
    picks = [parts[-n:] if from_end else parts[:n] for n in range(1, len(parts) + 1)]
    return [" ".join(p).strip(".\"'") for p in picks]


def alternatives(value: str, prompt: str) -> Alternatives:
    """Every sentence of the prompt that names `value` (as whole words): the options
    written next to it, and whether a condition with an other branch or a judgement word
    governs it."""
    needle = re.compile(rf"(?<!\w){re.escape(value.strip())}(?!\w)", re.IGNORECASE)
    either: list[str] = []
    listed: list[str] = []
    conditional = False
    judgement: str | None = None
    for sentence in _SENTENCE.findall(_PROMPT_URL.sub("<url>", prompt)):
        spans = [m.span() for m in needle.finditer(sentence)]
        if not spans:
            continue
        branches = _CONDITION.search(sentence) and _OTHERWISE.search(sentence)
        judgement = judgement or judgement_word(sentence)
        for start, end in spans:
            if branches and (
                _BRANCH_BEFORE.match(sentence[end:]) or _BRANCH_AFTER.search(sentence[:start])
            ):
                conditional = True
            after = _OPTION_AFTER.match(sentence[end:].lstrip("\"'\u2019\u201d"))
            before = _OPTION_BEFORE.search(sentence[:start].rstrip("\"'\u2018\u201c"))
            for match, from_end in ((after, False), (before, True)):
                if match is None:
                    continue
                joined = "or" in match["sep"].lower() or "/" in match["sep"]
                options = _phrases(match["words"], from_end=from_end)
                (either if joined else listed).extend(options)
    return Alternatives(tuple(either), tuple(listed), conditional, judgement)


def _mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def _reads_holding(value: str, sources: Sequence[Source]) -> tuple[int, ...]:
    """The reads whose content names `value` (whole words, any case)."""
    return tuple(
        s.step for s in sources if s.reads and any(_mentions(leaf, value) for _, leaf in s.leaves)
    )


def choice(
    value: str, kind: Kind, sources: Sequence[Source], ctx: Context, context_step: int | None
) -> str | None:
    """Why a value the prompt names is a decision the page made, or None when it is a
    fixed value of the task. The prompt must offer it as one option among others: joined
    by "or" to another, a branch of a condition with an else ("yes if ..., otherwise
    no"), or one of a listed few a judgement word chooses from ("of Widget, Gadget and
    Gizmo, the cheapest"). And the run must have read something to decide from: a typed
    or answered verdict ("no", "ALERT") needs only an earlier read; a label to click is
    chosen among what the page showed, so the page must show it and a listed rival too.
    """
    if kind not in ("label", "data"):
        return None  # a URL or a command the prompt writes stays as written
    alts = alternatives(value, ctx.prompt)
    holding = _reads_holding(value, sources)
    if kind == "label" and not holding:
        return None
    if kind == "data" and not holding and context_step is None:
        return None

    def shown(option: str) -> bool:
        return (
            bool(option)
            and option.casefold() != value.casefold()
            and (kind == "data" or bool(_reads_holding(option, sources)))
        )

    if alts.conditional:
        return "one branch of a condition the task sets, decided by the page"
    if any(shown(o) for o in alts.either):
        return "one of the alternatives the task names, decided by the page"
    listed_rivals = [o for o in alts.listed if o.casefold() != value.casefold()]
    if (
        alts.judgement is not None
        and holding
        and any(_reads_holding(o, sources) for o in listed_rivals)
    ):
        return f"the {alts.judgement!r} of the options the task names, decided by the page"
    return None


def provenance(
    value: str,
    kind: Kind,
    sources: Sequence[Source],
    ctx: Context,
    *,
    context_step: int | None = None,
) -> Provenance:
    """Classify one string input value (or the answer, as kind "data").
    `context_step` is the read the small model would look at when the value came from
    nowhere. A template may be open (text several list items hold): `bind` the values of
    one input (or the answer) together before use."""
    if kind == "structure":
        return Provenance("constant", "how, not what")
    if not value.strip():
        return Provenance("constant", "blank")
    if value in ctx.constants:
        return Provenance("constant", "repeats an earlier constant input")
    decided: str | None = None
    if _named(ctx.prompt, value):
        # Named by the prompt is fixed, unless the prompt names it as one option the
        # page decides between: then the data flow below finds where it came from.
        decided = choice(value, kind, sources, ctx, context_step)
        if decided is None:
            return Provenance("constant", "from the task prompt")
    exact = find_exact(value, sources, ctx)
    if exact is not None:
        step = exact.pointers[0].step
        return Provenance(
            "template",
            f"the output of step {step}",
            exact,
            (step,),
            choice=decided is not None,
        )
    template = find_template(value, sources, ctx, kind)
    if kind in ("url", "generic"):
        link = resolved_link(value, sources, ctx, template)
        if link is not None:
            return Provenance(
                "judgement",
                f"the link {references.format_path(link.path)} found by step {link.step}",
                sources=(link.step,),
            )
    if template is not None and decided is None:
        steps = tuple(sorted({p.step for p in template.pointers}))
        if kind == "data":
            leak = leaked_content(template, sources, ctx)
            if leak is not None:
                why, leak_steps = leak
                return Provenance("judgement", why, sources=tuple(sorted({*steps, *leak_steps})))
        return Provenance("template", "built from earlier outputs", template, steps)
    if decided is not None:
        holding = _reads_holding(value, sources)
        steps = holding or ((context_step,) if context_step is not None else ())
        return Provenance("judgement", decided, sources=steps)
    if kind != "data":
        return Provenance("constant", "not found in any earlier output")
    words = tokens(value) - ctx.allowed_tokens
    if not words:
        return Provenance("constant", "made of the task prompt's words")
    if len(value) >= 3:
        containing = tuple(s.step for s in sources if any(value in leaf for _, leaf in s.leaves))
        if containing:
            return Provenance(
                "judgement", f"taken from the text of step {containing[-1]}", sources=containing
            )
    overlapping = tuple(s.step for s in sources if s.reads and words & s.tokens)
    if overlapping:
        return Provenance(
            "judgement",
            f"derived from the content of step {overlapping[-1]}",
            sources=overlapping,
        )
    steps = (context_step,) if context_step is not None else ()
    return Provenance(
        "judgement", "appears in no earlier output nor in the task prompt", sources=steps
    )


# --- text several list items hold: which item a reference reads ----------------------


_Key = TypeVar("_Key", bound=Hashable)


def _lines(template: Template) -> list[int]:
    """The line of the value each part starts on."""
    line, out = 0, []
    for part in template.parts:
        out.append(line)
        if isinstance(part, str):
            line += part.count("\n")
    return out


def bind(values: Mapping[_Key, Provenance]) -> dict[_Key, Provenance]:
    """Decide, for every open part (text several items of one list hold: "Operational"
    is the state of items 0, 1 and 3), which item it reads: the one a neighbouring
    reference reads from, on the same line of the same value ("Web app: Operational"),
    else anywhere in that value, else in another value of the same input (a form's other
    field). The first of these scopes with a reference into one of the items decides;
    when none does, or it names two of them, the value is a judgement: the small model
    reads it again rather than every replay reading the first item. `values` are the
    values of one step's input, or the answer alone."""
    anchors: list[tuple[_Key, int, tuple[int, Path, int]]] = []  # (value, line, item)
    for key, prov in values.items():
        if prov.template is None:
            continue
        open_parts = {i for i, _ in prov.template.open}
        for i, (part, line) in enumerate(
            zip(prov.template.parts, _lines(prov.template), strict=True)
        ):
            if isinstance(part, Pointer) and i not in open_parts:
                item = _item(part)
                if item is not None:
                    anchors.append((key, line, item))
    bound: dict[_Key, Provenance] = {}
    for key, prov in values.items():
        template = prov.template
        if template is None or not template.open:
            bound[key] = prov
            continue
        lines = _lines(template)
        parts = list(template.parts)
        for i, pointers in template.open:
            by_item: dict[tuple[int, Path, int], Pointer] = {}
            for pointer in pointers:
                item = _item(pointer)
                if item is not None:
                    by_item.setdefault(item, pointer)
            scopes = (
                {a for k, line, a in anchors if k == key and line == lines[i]},
                {a for k, _, a in anchors if k == key},
                {a for _, _, a in anchors},
            )
            hits: list[Pointer] = []
            for scope in scopes:
                hits = [pointer for item, pointer in by_item.items() if item in scope]
                if hits:
                    break
            if len(hits) != 1:
                positions = ", ".join(str(item[2] + 1) for item in by_item)
                why = (
                    f"items {positions} of a list of step {pointers[0].step} hold the same "
                    "text, and no reference beside it says which one it is"
                )
                bound[key] = Provenance("judgement", why, sources=prov.sources)
                break
            parts[i] = hits[0]
        else:
            bound[key] = replace(prov, template=Template(tuple(parts)))
    return bound


# --- the answer: a verdict on what the run read ----------------------------------------

# A task that asks for a verdict on what the run reads: a condition ("alert me if any
# service is down", "whether"), a check, or a question.
_ASKS_VERDICT = re.compile(
    r"\?|\b(?:if|whether|unless|when|whenever|alert|notify|warn|check|verify|monitor|ensure|"
    r"make sure)\b",
    re.IGNORECASE,
)
# Text the task quotes is a value to use, not a question to the run: the message to type
# ("Is the pool open on Sunday?"), the command to run (`df -h /`).
_QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|\u201c[^\u201d]*\u201d")
# Words that state a verdict: the polarity and the state of what was checked.
_VERDICT_WORDS = frozenset(
    {
        *("yes", "no", "not", "none", "nothing", "nobody", "never", "neither", "nor"),
        *("isn", "aren", "wasn", "weren", "doesn", "don", "didn", "hasn", "haven", "cannot"),
        *("ok", "okay", "fine", "good", "bad", "all", "any", "every", "some", "still"),
        *("up", "down", "open", "closed", "above", "below", "over", "under", "within"),
        *("true", "false", "pass", "passed", "passing", "fail", "failed", "failing"),
        *("operational", "available", "unavailable", "online", "offline", "running"),
        *("stopped", "healthy", "unhealthy", "degraded", "outage", "outages", "normal"),
        *("alert", "warning", "error", "errors", "problem", "problems", "issue", "issues"),
    }
)


def asks_verdict(prompt: str) -> str | None:
    """The word by which the task asks for a verdict on what the run reads, or None."""
    match = _ASKS_VERDICT.search(_QUOTED.sub(" ", _PROMPT_URL.sub(" ", prompt)))
    return match.group(0).lower() if match else None


def answer_provenance(
    value: str, sources: Sequence[Source], ctx: Context, content: Sequence[int]
) -> Provenance:
    """Classify the run's answer: a data value (`provenance`), except that once the run
    read content (`content`: the positions of steps whose output is content), an answer
    that looks fixed may be the run's verdict on it. "No service is down." is made of the
    prompt's words ("alert me if any service is down"), yet the page decided it: replayed
    as recorded, every replay would say all is well. So, with content read, an answer is
    constant only when the task asks for no verdict (a condition, a check, a question)
    and every word of it, the short ones too ("no", "up", "ok"), is the task's; a
    template whose own text states a verdict ("Nothing is down: {{...}}") is written
    again; and a verdict is written again from everything the run read (a check of two
    pages is about both)."""
    context_step = content[-1] if content else None
    prov = provenance(value, "data", sources, ctx, context_step=context_step)
    if not content:
        return prov  # nothing read: a fixed confirmation stays fixed
    asked = asks_verdict(ctx.prompt)
    if prov.kind == "constant" and value.strip():
        extra = sorted(words(value) - ctx.allowed_words)
        if asked is not None:
            why = f"a verdict on what the run read (the task asks {asked!r})"
        elif extra:
            why = f"the run's own words ({extra[0]!r}) on what it read"
        else:
            return prov
        return Provenance("judgement", why, sources=tuple(content))
    if asked is None:
        return prov
    if prov.kind == "template" and prov.template is not None:
        said = sorted(words(prov.template.literal) & _VERDICT_WORDS)
        if not said:
            return prov
        why = f"its text states a verdict ({said[0]!r}) on what the run read"
        return Provenance("judgement", why, sources=tuple(sorted({*prov.sources, *content})))
    if prov.kind == "judgement":
        return replace(prov, sources=tuple(sorted({*prov.sources, *content})))
    return prov


# --- picking items from lists -----------------------------------------------------------

_JUDGEMENT = re.compile(
    r"\b(cheap(?:est|er)|pricie(?:st|r)|(?:most|least|less|more) (?:expensive|relevant|"
    r"important|interesting|popular|useful)|lowest|highest|best|worst|largest|smallest|"
    r"biggest|top[- ]rated|highest[- ]rated|compare|decide|choose|pick|whichever|recommend\w*|"
    r"relevant|interesting|important)\b",
    re.IGNORECASE,
)
_ORDINAL_WORDS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
}
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
    "twenty": 20,
}
_ORDINAL_FORMS = re.compile(
    r"\b(\d+)(?:st|nd|rd|th)\b|#(\d+)\b|\b(?:item|number|no\.?|entry|result|position)\s*(\d+)\b",
    re.IGNORECASE,
)


def judgement_word(prompt: str) -> str | None:
    match = _JUDGEMENT.search(prompt)
    return match.group(0).lower() if match else None


def ordinals(prompt: str) -> set[int]:
    """1-based positions the prompt names ("the third", "2nd", "#4", "item 5")."""
    found = {n for word, n in _ORDINAL_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    for match in _ORDINAL_FORMS.finditer(prompt):
        found.add(int(next(g for g in match.groups() if g)))
    return found


def numbers(prompt: str) -> set[int]:
    found = {int(t) for t in _TOKEN.findall(prompt.casefold()) if t.isdecimal() and len(t) < 7}
    found |= {n for word, n in _NUMBER_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    return found


@dataclass(frozen=True)
class ListVerdict:
    """How values picked from one list are replayed: by position (`ok`; `last` means
    refer to the item as [-1]), by a small-model pick of the one item (`pick`: a single
    item chosen by a rule the data cannot express), or not at all (the consumers need
    judgement as a whole)."""

    ok: bool
    why: str = ""
    last: bool = False
    pick: int | None = None  # the index picked last time, when a pick step can redo it
    size: int = 0


def list_position(path: Path) -> tuple[Path, int] | None:
    """(the path of the list, the index into it) for the first index in `path`."""
    for i, item in enumerate(path):
        if isinstance(item, int):
            return path[:i], item
    return None


Container = tuple[int, Path]


def judge_lists(
    uses: Iterable[Pointer],
    outputs: Mapping[int, Any],
    prompt: str,
    limits: Mapping[int, int | None],
    chosen: Collection[Container] = (),
) -> dict[Container, ListVerdict]:
    """Decide, for every list some value was picked from, whether the picks follow a
    rule. `uses` are the pointers of every consumer in run order; `limits` the `limit`
    input of the step that produced each output (it fixes the list's length); `chosen`
    the lists a value was chosen from among options the prompt names (a judgement even
    when the prompt has no judgement word: "click Widget or Gadget")."""
    picked: dict[Container, list[int]] = {}
    for pointer in uses:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, index = position
        indexes = picked.setdefault((pointer.step, prefix), [])
        if index not in indexes:
            indexes.append(index)
    word = judgement_word(prompt)
    named = ordinals(prompt)
    counts = numbers(prompt)
    verdicts: dict[Container, ListVerdict] = {}
    for container, indexes in picked.items():
        step, prefix = container
        try:
            items = references.lookup(outputs[step], prefix)
        except (KeyError, IndexError, TypeError):
            verdicts[container] = ListVerdict(False, "the list is not in the output")
            continue
        n = len(items)
        if n <= 1:
            verdicts[container] = ListVerdict(True)
        elif word is not None or container in chosen:
            why = (
                f"picked from a list for a task that asks for a judgement ({word!r})"
                if word is not None
                else "picked from a list among options the task names"
            )
            pick = indexes[0] if len(indexes) == 1 else None
            verdicts[container] = ListVerdict(False, why, pick=pick, size=n)
        elif len(indexes) >= 2 and indexes == list(range(len(indexes))):
            k = len(indexes)
            if k == n and not (limits.get(step) == k or k in counts):
                verdicts[container] = ListVerdict(
                    False, f"uses all {n} items of a list whose length may change"
                )
            else:
                verdicts[container] = ListVerdict(True, f"the first {k} items")
        elif len(indexes) == 1:
            index = indexes[0]
            if index == 0:
                verdicts[container] = ListVerdict(True, "the first item")
            elif index + 1 in named:
                verdicts[container] = ListVerdict(True, f"item {index + 1}, named by the task")
            elif index == n - 1:
                verdicts[container] = ListVerdict(True, "the last item", last=True)
            else:
                verdicts[container] = ListVerdict(
                    False,
                    f"item {index + 1} of {n}, a position no rule explains",
                    pick=index,
                    size=n,
                )
        else:
            verdicts[container] = ListVerdict(
                False, f"picks items {[i + 1 for i in indexes]} in an order no rule explains"
            )
    return verdicts


def apply_verdicts(prov: Provenance, verdicts: Mapping[Container, ListVerdict]) -> Provenance:
    """A templated value whose list picks follow no rule (and are not a single pick a
    small-model step can redo) becomes a judgement; a pick of the last item is rewritten
    to index -1."""
    if prov.kind != "template" or prov.template is None:
        return prov
    rewrite: dict[Pointer, Pointer] = {}
    for pointer in prov.template.pointers:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, _ = position
        verdict = verdicts.get((pointer.step, prefix))
        if verdict is None:
            continue
        if not verdict.ok and verdict.pick is None:
            return Provenance("judgement", verdict.why, sources=prov.sources)
        if verdict.last:
            rest = pointer.path[len(prefix) + 1 :]
            rewrite[pointer] = Pointer(pointer.step, (*prefix, -1, *rest))
    if not rewrite:
        return prov
    return replace(prov, template=prov.template.with_pointers(rewrite))
