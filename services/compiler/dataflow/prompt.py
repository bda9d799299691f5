"""What the task prompt asks: a judgement (the cheapest, the most relevant), a verdict
on what the run reads (a condition, a check, a question), positions it names ("the
third") and counts it states ("top 3").

The prompt's URLs and the text it quotes are values to use, not words of the request:
"`df -h /`" or "Is the pool open on Sunday?" typed into a form asks nothing of the run.
"""

from __future__ import annotations

import re

from services.compiler.dataflow.text import TOKEN

# A URL written in a prompt: its words are an address, not what the task says.
PROMPT_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
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


def asks_verdict(prompt: str) -> str | None:
    """The word by which the task asks for a verdict on what the run reads, or None."""
    match = _ASKS_VERDICT.search(_QUOTED.sub(" ", PROMPT_URL.sub(" ", prompt)))
    return match.group(0).lower() if match else None


def judgement_word(prompt: str) -> str | None:
    """The word by which the task asks for a judgement among items, or None."""
    match = _JUDGEMENT.search(prompt)
    return match.group(0).lower() if match else None


def ordinals(prompt: str) -> set[int]:
    """1-based positions the prompt names ("the third", "2nd", "#4", "item 5")."""
    found = {n for word, n in _ORDINAL_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    for match in _ORDINAL_FORMS.finditer(prompt):
        found.add(int(next(g for g in match.groups() if g)))
    return found


def numbers(prompt: str) -> set[int]:
    """The counts the prompt states, in digits (under a million) or words ("three")."""
    found = {int(t) for t in TOKEN.findall(prompt.casefold()) if t.isdecimal() and len(t) < 7}
    found |= {n for word, n in _NUMBER_WORDS.items() if re.search(rf"\b{word}\b", prompt, re.I)}
    return found
