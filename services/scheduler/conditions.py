"""Condition predicates, pure: small declarative tests on a tool's output, and what
makes a condition trigger uncheckable (a `url` its tool cannot use, a `path` its output
never has, a check the tools service refuses). Reading the output is
condition_probe.py's; when each condition is checked, condition_watch.py's.

`path` picks a value out of structured output (`stdout`, `items.0.price`); without it
the whole output is tested.

Text tests look at the text values: a string as it is, a structure's strings and
numbers (not its keys, not JSON-escaped), true when any one of them holds the text.

Number tests use the value itself when it is a number, else the first number written
in its text. A structure (no `path`, or a path to one) is read at its main text: the
`stdout`, `text` or `content` string when there is one (shell_exec's stdout), else its
only field holding a number; anything else is a NeedsPath error asking for `path` (the
first number of a dict would be whichever key sorts first, e.g. shell_exec's exit_code).

How a number is read: U+2212 (the minus sign) is a minus; `,` and `.` group thousands
or mark decimals; no-break, thin and narrow no-break spaces group thousands, a plain
space ends the number. When both `,` and `.` appear, the last one is the decimal mark
(`$1,299.00` and `€1.299,00` -> 1299.0). A lone `,` followed by exactly three digits
groups (`1,299` -> 1299; not after zero: `0,125` -> 0.125), else it is the decimal
mark (`12,5` -> 12.5); a lone `.` is always the decimal mark (`1.299` -> 1.299). A
number whose groups are not of three digits is read up to its first separator. A plain
number (no group marks) may have an exponent (`5e-05`, `2.5E3`) unless a letter or digit
follows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from contracts.tasks import Above, Below, Contains, NotContains, Predicate
from contracts.tools import NAVIGATE, is_browser_tool

_GROUP_SPACES = "\u00a0\u2009\u202f"
# An exponent counts only when no letter or digit follows it (`1e5abc` is a word).
_NUMBER = re.compile(
    rf"([-+\u2212]?)(\d(?:[\d.,{_GROUP_SPACES}]*\d)?|\.\d+)([eE][-+\u2212]?\d+(?!\w))?"
)
_PLAIN = re.compile(r"\d*\.?\d+")
_SEPARATOR = re.compile(rf"[.,{_GROUP_SPACES}]")
# Fields of a structured output that hold its main text, in order of preference.
MAIN_TEXT_FIELDS = ("stdout", "text", "content")
# The top-level fields of tools whose output shape is known, to check `path` up front.
KNOWN_OUTPUT_FIELDS: dict[str, tuple[str, ...]] = {
    "shell_exec": ("exit_code", "stdout", "stderr"),
}


class ConditionError(ValueError):
    """The output does not have what the predicate needs (no such path, no number)."""


class NeedsPath(ConditionError):
    """The predicate cannot be evaluated on this kind of output without a `path` (which
    field to read): a fault of the trigger, not of this one output, so checking again
    will not help."""


class BrokenCheck(ConditionError):
    """The tools service refused the check itself (no such tool, an input the tool
    refuses, a command or path its policy denies): every later check would be refused
    the same way, so the task is paused rather than checked forever."""


# The tools service's refusals (contracts/errors.py) that say the call is wrong, not that
# the service is away or slow (`unavailable`, `timeout`, `internal`): asking again gets
# the same answer until someone changes the trigger or the tools policy.
BROKEN_CHECK_CODES = frozenset(
    {"not_found", "invalid_request", "tool_not_allowed", "command_denied", "path_denied"}
)


def refused_check(code: str, message: str, field: str | None) -> ConditionError:
    """The error for a check the tools service refused: BrokenCheck when the refusal
    names the trigger's `tool` or `input` (so it will repeat), else a plain
    ConditionError, tried again next time (a request field unknown to a tools service
    of another version is no fault of the trigger)."""
    ours = field is not None and (field in ("tool", "input") or field.startswith("input."))
    if code in BROKEN_CHECK_CODES and ours:
        return BrokenCheck(f"the tools service refuses the call ({code}): {message}")
    return ConditionError(f"the tools service could not make the call ({code}): {message}")


def page_url_problem(tool: str, url: str | None) -> str | None:
    """What is wrong with a condition's `url` for its `tool`, or None. Each check has a
    browser session of its own, which starts blank: a tool acting on the current page
    reads nothing there (a `not_contains` would hold every time) unless `url` opens
    the page first; for any other tool `url` would be silently ignored."""
    if url is None:
        if is_browser_tool(tool) and tool != NAVIGATE:
            return (
                f"{tool} acts on the page open in the check's session, which starts blank:"
                " give the page's `url`"
            )
        return None
    if tool == NAVIGATE:
        return "browser_navigate opens the page in its input: leave out `url`"
    if not is_browser_tool(tool):
        return f"`url` opens a page for a browser tool; {tool} is not one: leave out `url`"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # a malformed IPv6 host ("http://[::1")
        return "`url` is not a valid URL"
    if parts.scheme not in ("http", "https"):
        return f"`url` must be an http(s) URL, not {parts.scheme or 'one without a scheme'}"
    if not host:
        return "`url` must name a host (https://example.com/page)"
    return None


def check_path(tool: str, predicate: Predicate) -> None:
    """Refuse a `path` the tool's output can never have (for tools whose output shape
    is known), so the mistake shows at create time, not as a condition never true."""
    fields = KNOWN_OUTPUT_FIELDS.get(tool)
    if fields is None or not predicate.path:
        return
    first = predicate.path.split(".", 1)[0]
    if first not in fields:
        raise ConditionError(f"{tool} output has no {first!r}; its fields are {', '.join(fields)}")


def value_at(output: Any, path: str | None) -> Any:
    """Follow a dotted path through dicts and lists (list items by index). Output that
    is a JSON string is parsed first, so a path works on a tool that returns JSON text."""
    if not path:
        return output
    current = output
    walked: list[str] = []
    for part in path.split("."):
        if isinstance(current, str):
            try:
                current = json.loads(current)
            except ValueError:
                raise ConditionError(
                    f"cannot follow {path!r}: {'.'.join(walked) or 'output'} is text"
                ) from None
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(current) <= index < len(current):
                raise ConditionError(f"no item {index} at {'.'.join(walked) or 'output'}")
            current = current[index]
        else:
            raise ConditionError(f"no {part!r} at {'.'.join(walked) or 'output'}")
        walked.append(part)
    return current


def texts(value: Any) -> Iterator[str]:
    """The text values a text test looks at."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)
    else:
        yield json.dumps(value)  # a number, true, false, null


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _main_value(value: dict[str, Any] | list[Any]) -> Any:
    """Where a number test reads a structure (see the module docstring)."""
    if isinstance(value, list):
        if len(value) == 1:
            return value[0]
        if not value:
            # Nothing found this time (no results yet): the next output may have some.
            raise ConditionError("the output is an empty list: no number to test")
        raise NeedsPath(
            f"the output is a list of {len(value)} items: set the predicate's `path`"
            " to the one to test (e.g. `0` or `0.price`)"
        )
    for key in MAIN_TEXT_FIELDS:
        if isinstance(value.get(key), str):
            return value[key]
    numeric = [
        key
        for key, item in value.items()
        if _is_number(item) or (isinstance(item, str) and _NUMBER.search(item))
    ]
    if len(numeric) == 1:
        return value[numeric[0]]
    fields = ", ".join(sorted(map(str, value))[:20])
    raise NeedsPath(
        f"cannot tell which field of the output to read a number from: set the"
        f" predicate's `path` to one of: {fields}"
    )


def _read(digits: str) -> float:
    """A number token (`1,299.00`, `1 299,5`) as a float, by the module's rules."""
    if digits.startswith("."):
        return float(digits)
    marks = [c for c in digits if c in ".,"]
    decimal = None
    if "." in marks and "," in marks:
        decimal = marks[-1]
    elif marks == ["."]:
        decimal = "."
    elif marks == [","]:
        before, after = digits.split(",")
        thousands = len(after) == 3 and after.isdigit() and before.strip("0") != ""
        decimal = None if thousands else ","
    whole, fraction = digits.rsplit(decimal, 1) if decimal else (digits, "")
    groups = _SEPARATOR.split(whole)
    valid = (
        (decimal is None or decimal not in whole)
        and (fraction == "" or fraction.isdigit())
        and (len(groups) == 1 or (len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])))
    )
    if not valid:
        match = re.match(r"\d+", digits)
        assert match is not None  # a token starts with a digit
        return float(match.group())
    return float("".join(groups) + ("." + fraction if fraction else ""))


def as_number(value: Any) -> float:
    if _is_number(value):
        return float(value)
    if isinstance(value, dict | list):
        return as_number(_main_value(value))
    text = value if isinstance(value, str) else json.dumps(value)
    match = _NUMBER.search(text)
    if match is None:
        raise ConditionError(f"no number in {text[:80]!r}")
    sign, digits, exponent = match.groups()
    if exponent and _PLAIN.fullmatch(digits):
        number = float(digits + exponent.replace("\u2212", "-"))
    else:
        number = _read(digits)
    return -number if sign in ("-", "\u2212") else number


def holds(predicate: Predicate, output: Any) -> bool:
    """Whether the predicate is true of the output. Raises ConditionError when the
    output lacks what the predicate tests (the scheduler takes it as "not true"), and
    NeedsPath when the predicate cannot be tested on such output at all (the scheduler
    pauses the task)."""
    value = value_at(output, predicate.path)
    match predicate:
        case Contains(text=text):
            return any(text in t for t in texts(value))
        case NotContains(text=text):
            return not any(text in t for t in texts(value))
        case Above(value=limit):
            return as_number(value) > limit
        case Below(value=limit):
            return as_number(value) < limit
    raise TypeError(f"unknown predicate {predicate!r}")
