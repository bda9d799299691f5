"""References from one executor step's input to an earlier step's output.

Syntax (inside any string of a step's input, a prompt or a result template):

    {{step_N}}                      the whole output of executor step N
    {{step_N.field}}                a field of an object output
    {{step_N[0]}}  {{step_N[-1]}}   an item of a list output (negative counts from the end)
    {{step_N[0].href}}              paths chain: fields and indexes in any order
    {{step_N["a key"]}}             a field whose name is not an identifier (JSON string)

    {{step_N.field|url}}            the text percent-encoded for a URL component
    {{step_N.field|form}}           the same, with spaces as "+" (a form-style query)

Whitespace just inside the braces is allowed (`{{ step_2[0] }}`). A string that is
exactly one reference becomes the referenced value with its JSON type (a list stays a
list); references inside a longer string are replaced by their text (strings as they
are, anything else as compact JSON). Text that does not match the syntax is left alone,
so `{{name}}` in a recorded input is not a reference. Backslashes just before a
reference pair up, as in most escape syntaxes: each pair is one backslash of text, and an
odd one left over makes the reference literal text. `\\{{step_1}}` renders as
`{{step_1}}`, `\\\\{{step_1}}` as a backslash and step 1's output (a Windows path
before a file name), `\\\\\\{{step_1}}` as `\\{{step_1}}`. Backslashes anywhere else
are plain text.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, quote_plus

PathItem = str | int
Path = tuple[PathItem, ...]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_PATH_PART = r"\.[A-Za-z_][A-Za-z0-9_-]*|\[-?\d+\]|\[\"(?:[^\"\\]|\\.)*\"\]"
_REF_BODY = rf"step_(?P<step>\d+)(?P<path>(?:{_PATH_PART})*)"
# A reference anywhere in a string, with the backslashes just before it (for escaping).
_REF = re.compile(rf"(?P<bs>\\*)\{{\{{\s*{_REF_BODY}(?:\s*\|\s*(?P<enc>url|form))?\s*\}}\}}")
_PART = re.compile(_PATH_PART)


class BadReference(ValueError):
    """Base class of reference errors."""


class ReferenceSyntaxError(BadReference):
    """The text is not a reference."""


class UnresolvedReference(BadReference):
    """A reference names a step, field or index the outputs do not have."""

    def __init__(self, ref: Ref, message: str) -> None:
        super().__init__(f"{ref.format()}: {message}")
        self.ref = ref


class BlankReference(UnresolvedReference):
    """A reference resolved to nothing (null, blank text, an empty list or object) where
    a value is required (`render(..., require_values=True)`)."""


# How a URL component encodes a value: "url" (quote: a space is %20) or "form"
# (quote_plus: a space is "+").
Encoding = Literal["url", "form"]
_ENCODINGS: dict[str, Encoding] = {"url": "url", "form": "form"}


@dataclass(frozen=True, slots=True)
class Ref:
    step: int
    path: Path = ()
    encoding: Encoding | None = None  # the value's text goes into a URL component

    def format(self) -> str:
        """`{{step_N.path}}`: the reference as it appears in a template."""
        suffix = f"|{self.encoding}" if self.encoding else ""
        return "{{" + self.name + format_path(self.path) + suffix + "}}"

    @property
    def name(self) -> str:
        return f"step_{self.step}"

    def child(self, *items: PathItem) -> Ref:
        return Ref(self.step, self.path + items, self.encoding)


def encode(text: str, encoding: Encoding) -> str:
    """`text` as one URL component holds it: every reserved character escaped ("/"
    too: the value is one segment or one query value, never a path of its own)."""
    return quote_plus(text, safe="") if encoding == "form" else quote(text, safe="")


def _ref_of(match: re.Match[str]) -> Ref:
    encoding = _ENCODINGS.get(match.group("enc") or "")
    return Ref(int(match.group("step")), _parse_path(match.group("path")), encoding)


def format_path(path: Path) -> str:
    out = []
    for item in path:
        if isinstance(item, int):
            out.append(f"[{item}]")
        elif _IDENT.fullmatch(item):
            out.append(f".{item}")
        else:
            out.append("[" + json.dumps(item, ensure_ascii=False) + "]")
    return "".join(out)


def _parse_path(text: str) -> Path:
    items: list[PathItem] = []
    for part in _PART.findall(text):
        if part.startswith("."):
            items.append(part[1:])
        elif part.startswith('["'):
            items.append(json.loads(part[1:-1]))
        else:
            items.append(int(part[1:-1]))
    return tuple(items)


def parse(text: str) -> Ref:
    """Parse a string that is exactly one reference (`{{step_2[0].href}}`)."""
    match = _REF.fullmatch(text.strip())
    if match is None or match.group("bs"):
        raise ReferenceSyntaxError(f"not a reference: {text!r}")
    return _ref_of(match)


def exact(text: str) -> Ref | None:
    """The reference when `text` is exactly one reference (nothing around it), else None."""
    match = _REF.fullmatch(text)
    if match is None or match.group("bs"):
        return None
    return _ref_of(match)


def find(value: Any) -> list[Ref]:
    """Every reference in a JSON value (strings at any depth), in document order."""
    return list(_iter_refs(value))


def _iter_refs(value: Any) -> Iterator[Ref]:
    if isinstance(value, str):
        for match in _REF.finditer(value):
            if len(match.group("bs")) % 2 == 0:
                yield _ref_of(match)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _iter_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _iter_refs(item)


def lookup(value: Any, path: Path) -> Any:
    """Follow `path` into a JSON value; KeyError/IndexError/TypeError say why it failed."""
    for item in path:
        if isinstance(item, int):
            if not isinstance(value, list):
                raise TypeError(f"index [{item}] into {_kind(value)}")
            if not -len(value) <= item < len(value):
                raise IndexError(f"index [{item}] out of range (list of {len(value)})")
            value = value[item]
        else:
            if not isinstance(value, dict):
                raise TypeError(f"field {item!r} of {_kind(value)}")
            if item not in value:
                raise KeyError(f"no field {item!r}")
            value = value[item]
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )


def resolve(ref: Ref, outputs: Mapping[int, Any]) -> Any:
    """The value `ref` points to, given the outputs of earlier steps by step index."""
    if ref.step not in outputs:
        raise UnresolvedReference(ref, f"no output from step {ref.step} (yet)")
    try:
        return lookup(outputs[ref.step], ref.path)
    except (KeyError, IndexError, TypeError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise UnresolvedReference(ref, str(message)) from None


def stringify(value: Any) -> str:
    """How a value reads inside a longer string: strings as they are, else compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def blank(value: Any) -> bool:
    """Nothing to put in a value's place: null, blank text, an empty list or object."""
    return value is None or value in ([], {}) or (isinstance(value, str) and not value.strip())


def _value(ref: Ref, outputs: Mapping[int, Any], require_values: bool) -> Any:
    value = resolve(ref, outputs)
    if require_values and blank(value):
        # The compiler only makes references to values that had text in the run it
        # compiled: nothing there today means the page or the output changed (a renamed
        # field extracts as null), and rendering it would write "null" or "" into an
        # answer or an input as if all were well.
        shown = "null" if value is None else json.dumps(value, ensure_ascii=False)
        raise BlankReference(ref, f"is {shown} today, but a value is required")
    return value


def render_string(text: str, outputs: Mapping[int, Any], *, require_values: bool = False) -> Any:
    """Fill the references in one string. `require_values`: a reference that resolves
    to nothing (`blank`) raises BlankReference."""
    ref = exact(text)
    if ref is not None:
        value = _value(ref, outputs, require_values)
        return encode(stringify(value), ref.encoding) if ref.encoding else value

    def substitute(match: re.Match[str]) -> str:
        backslashes = match.group("bs")
        text = "\\" * (len(backslashes) // 2)
        if len(backslashes) % 2:  # escaped: the reference is text
            return text + match.group(0)[len(backslashes) :]
        ref = _ref_of(match)
        filled = stringify(_value(ref, outputs, require_values))
        return text + (encode(filled, ref.encoding) if ref.encoding else filled)

    return _REF.sub(substitute, text)


def render(value: Any, outputs: Mapping[int, Any], *, require_values: bool = False) -> Any:
    """Fill every reference in a JSON value (a step's input, a prompt, a template)."""
    if isinstance(value, str):
        return render_string(value, outputs, require_values=require_values)
    if isinstance(value, dict):
        return {
            key: render(item, outputs, require_values=require_values) for key, item in value.items()
        }
    if isinstance(value, list):
        return [render(item, outputs, require_values=require_values) for item in value]
    return value


def render_text(template: str, outputs: Mapping[int, Any], *, require_values: bool = False) -> str:
    """Render a template that must give text (a result, a prompt): a lone reference to
    a list or number becomes its compact JSON."""
    return stringify(render_string(template, outputs, require_values=require_values))


def render_command(
    template: str, outputs: Mapping[int, Any], *, require_values: bool = False
) -> str:
    """A command line (shell_exec's `command`) with its references filled word by word:
    the line is split like a shell splits it, each word rendered, and the words joined
    with shell quoting. A value with a space, a quote or a `-` in front then stays the
    one argument it was in the recorded run, instead of splitting into words of its own
    (the tools service splits the line the same way and runs no shell). A line that
    cannot be split, or holds an escaped reference (which splitting would unescape), is
    rendered as text; so is a line that is one reference alone: its value is a whole
    command line (one the small model writes again), not one argument of one."""
    if not find(template) or exact(template) or "\\{{" in template:
        return render_text(template, outputs, require_values=require_values)
    try:
        words = shlex.split(template)
    except ValueError:
        return render_text(template, outputs, require_values=require_values)
    return shlex.join(render_text(w, outputs, require_values=require_values) for w in words)


def render_input(
    tool: str, template: Mapping[str, Any], outputs: Mapping[int, Any], *, require_values: bool
) -> dict[str, Any]:
    """A tool step's input as the replay sends it: every reference filled, and
    shell_exec's command word by word (render_command)."""
    rendered: dict[str, Any] = render(dict(template), outputs, require_values=require_values)
    command = template.get("command")
    if tool == "shell_exec" and isinstance(command, str):
        rendered["command"] = render_command(command, outputs, require_values=require_values)
    return rendered


def escape(text: str, *, before_reference: bool = False) -> str:
    """Make every reference-shaped part of `text` literal, so render(escape(t)) == t.
    `before_reference`: a live reference follows the text, so its trailing backslashes
    are doubled too (else they would pair with the reference)."""

    def literal(match: re.Match[str]) -> str:
        backslashes = match.group("bs")  # each one a backslash of text: doubled
        return backslashes * 2 + "\\" + match.group(0)[len(backslashes) :]

    escaped = _REF.sub(literal, text)
    if before_reference:
        trailing = len(escaped) - len(escaped.rstrip("\\"))
        escaped += "\\" * trailing
    return escaped


def escape_value(value: Any) -> Any:
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {key: escape_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [escape_value(item) for item in value]
    return value


def paths_to(value: Any, target: str) -> list[Path]:
    """Every path at which `value` holds exactly the string `target` (document order)."""
    found: list[Path] = []

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, str):
            if node == target:
                found.append(path)
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, (*path, key))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, (*path, index))

    walk(value, ())
    return found


def leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Every string in a JSON value with its path (document order)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
