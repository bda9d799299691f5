"""The terms of the data flow: the earlier outputs a value may come from (`Source`), a
pointer into one, a value written as literal text and pointers (`Template`), what is
constant for the task (`Context`), and the finding for one value (`Provenance`).

A list item's fields belong together: the record a pointer reads (`record_of`) tells one
item's text from another item's that happens to be the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from services.compiler.dataflow.text import SHORT_STATES, short_word, tokens, words
from services.executor import references
from services.executor.references import Encoding, Path


@dataclass(frozen=True)
class Source:
    step: int  # position of the step in the trace
    tool: str
    output: Any
    leaves: tuple[tuple[Path, str], ...]
    tokens: frozenset[str]
    reads: bool  # its output is content: a page, a file, a command's output
    numbers: frozenset[str] = frozenset()  # leaves that are a number and nothing else
    # Every path of each leaf text, indexed once: values are looked up, not rescanned.
    paths: Mapping[str, tuple[Path, ...]] = field(default_factory=dict, compare=False)
    shorts: frozenset[str] = frozenset()  # leaves that are a short word, casefolded
    said: frozenset[str] = frozenset()  # `SHORT_STATES` the content says, in its text

    @classmethod
    def of(cls, step: int, tool: str, output: Any, *, reads: bool) -> Source:
        leaves = tuple(references.leaves(output))
        found: set[str] = set()
        paths: dict[str, list[Path]] = {}
        for path, leaf in leaves:
            if leaf not in paths:
                found |= tokens(leaf)
                paths[leaf] = []
            paths[leaf].append(path)
        numbers = frozenset(t.strip() for t in paths if t.strip().isdecimal())
        shorts = frozenset(t.strip().casefold() for t in paths if short_word(t.strip()))
        said = {w for t in paths for w in words(t) & SHORT_STATES} if reads else set()
        return cls(
            step,
            tool,
            output,
            leaves,
            frozenset(found),
            reads,
            numbers,
            {leaf: tuple(found_at) for leaf, found_at in paths.items()},
            shorts,
            frozenset(said),
        )


@dataclass(frozen=True)
class Pointer:
    """A path into the output of the trace step at position `step`; `encoding`: the
    value stands in a URL's path segment or query and is encoded as it is there."""

    step: int
    path: Path
    encoding: Encoding | None = None


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


# --- records: which item a field belongs to ---------------------------------------------

Record = tuple[int, Path]


def record_of(pointer: Pointer) -> Record:
    """The record whose field `pointer` reads, so that one item's fields tell its text
    from another item's: the deepest list item around the field (`groups[0].items[1]`,
    not `groups[0]`), a table row for a cell, a string of a list of strings itself, else
    the object holding the field."""
    path = pointer.path
    if path and isinstance(path[-1], int):
        cell = len(path) >= 2 and isinstance(path[-2], int)
        return pointer.step, path[:-1] if cell else path
    deepest = max((i for i, key in enumerate(path) if isinstance(key, int)), default=None)
    return pointer.step, path[: deepest + 1] if deepest is not None else path[:-1]


def item_index(record: Record) -> int | None:
    """The record's position in its list, if it is a list item."""
    path = record[1]
    return path[-1] if path and isinstance(path[-1], int) else None


def occurrences(source: Source, leaf: str) -> tuple[Pointer, ...]:
    """A pointer to every place `source`'s output holds exactly `leaf`."""
    return tuple(Pointer(source.step, path) for path in source.paths.get(leaf, ()))


def several_records(pointers: Sequence[Pointer]) -> bool:
    """Do these pointers go into two or more records (so which one is meant matters)?"""
    return len({record_of(p) for p in pointers}) > 1
