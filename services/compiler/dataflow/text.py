"""Reading text in any script: the words and numbers content is made of, whether a text
names a value as a whole word, and the marks that number an answer's lines.

A value is matched against text as whole words: "Tom" is not in "bottom", "1" is not in
"127.0.0.1". Chinese, Japanese, Korean and the scripts of South-East Asia write words
without spaces between them, so there a neighbouring character bounds nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Letters and digits of any script (\w without "_", so snake_case splits into words).
TOKEN = re.compile(r"[^\W_]+")
# Scripts written without spaces between words, where one or two characters are a word.
DENSE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# Those, and the scripts of South-East Asia (Thai, Lao, Myanmar, Khmer): a word there runs
# into its neighbours ("で東京の", "서울의", "อากาศกรุงเทพที่") with no space to bound it.
_UNSPACED = re.compile(
    r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
    r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
# Short words that state how something is: on a page they are what an answer reports.
SHORT_STATES = frozenset({"ok", "up", "no"})


def tokens(text: str) -> set[str]:
    """Words of 3+ characters (any length in Chinese, Japanese or Korean) and every
    number, casefolded: what content is made of."""
    return {
        t for t in TOKEN.findall(text.casefold()) if len(t) >= 3 or t.isdecimal() or DENSE.search(t)
    }


def words(text: str) -> set[str]:
    """Every word and number, casefolded, short ones too: "no", "up" and "ok" are what a
    verdict is made of."""
    return set(TOKEN.findall(text.casefold()))


def short_word(text: str) -> bool:
    """A word too short to stand inside a longer value by itself ("OK", "No", "Up"):
    found there, it may be an item's value all the same."""
    return 0 < len(text) <= 2 and text.isalpha()


def bounded(text: str, start: int, end: int) -> bool:
    """The match text[start:end] does not cut a word in two."""
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if text[start].isalnum() and before.isalnum():
        return False
    return not (text[end - 1].isalnum() and after.isalnum())


_JOINER = re.compile(r"[.,:/@-]")


def _edge(text: str, at: int, step: int) -> bool:
    """Does a name end at `at` (looking outwards by `step`, -1 to the left, 1 to the right)?
    Not when a word character goes on, nor a joiner and a word character ("127.0.0.1",
    "Jean-Luc"); in a script without spaces, a neighbour bounds nothing ("で東京の")."""
    near = at - 1 if step < 0 else at
    if near < 0 or near >= len(text):
        return True
    if _UNSPACED.match(text[near]):
        return True
    if text[near].isalnum() or text[near] == "_":
        return False
    beyond = near + step
    return not (
        _JOINER.match(text[near])
        and 0 <= beyond < len(text)
        and (text[beyond].isalnum() or text[beyond] == "_")
    )


def named(text: str, value: str) -> bool:
    """Does `text` name `value` as a whole: not inside a longer word ("Tom" in "bottom")
    nor a dotted or dashed token ("1" in "127.0.0.1", "Jean" in "Jean-Luc")?"""
    if not value or len(value) > len(text):
        return False
    for match in re.finditer(re.escape(value), text, re.IGNORECASE):
        start, end = match.span()
        if (not value[0].isalnum() or _edge(text, start, -1)) and (
            not value[-1].isalnum() or _edge(text, end, 1)
        ):
            return True
    return False


def mentions(text: str, value: str) -> bool:
    """Does `text` hold `value` (any case) with no word character right beside it?"""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


# --- marks that number lines ------------------------------------------------------------

# A mark that may number a line or a list item ("1. ", "2) ", "#3 "): at the start of a
# line, or after a colon, comma or semicolon ("Deals: 1) Alpha, 2) Beta").
_MARK = re.compile(
    r"(?:^|(?<=[:,;]))([ \t]*)(?:(\d{1,6})[.)](?=\s|$)|(#)(\d{1,6})(?!\w))", re.MULTILINE
)


@dataclass(frozen=True)
class Mark:
    start: int
    end: int
    number: int
    listed: bool  # a line of a numbered list of two or more lines


def marks(text: str) -> list[Mark]:
    """The marks in `text` that may number its lines or items: each starts a line or an
    item that goes on with content ("3." ending "issues: 3." is a value), and the marks
    of one level (the lines at one indentation, or the items of one line) count 1, 2,
    3... in order (a 1 starts a new list)."""
    runs: dict[tuple[str, str | int], list[list[re.Match[str]]]] = {}
    line = 0
    line_at = 0  # where `line` starts
    for match in _MARK.finditer(text):
        line += text.count("\n", line_at, match.start())
        line_at = match.start()
        end = match.end()
        line_end = text.find("\n", end)
        if not text[end : len(text) if line_end == -1 else line_end].strip():
            continue
        starts_line = match.start() == 0 or text[match.start() - 1] == "\n"
        key = ("line", match.group(1)) if starts_line else ("item", line)
        number = int(match.group(2) or match.group(4))
        level = runs.setdefault(key, [])
        if level and number == len(level[-1]) + 1:
            level[-1].append(match)
        elif number == 1:
            level.append([match])
    found = [
        Mark(
            match.start(2) if match.group(2) else match.start(3),
            match.end(),
            int(match.group(2) or match.group(4)),
            where == "line" and len(run) >= 2,
        )
        for (where, _), level in runs.items()
        for run in level
        for match in run
    ]
    return sorted(found, key=lambda m: m.start)
