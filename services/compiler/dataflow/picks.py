"""Items picked out of a list: by a rule (a position), by a small-model pick, or as
part of a judgement.

Picking items from a list is a rule only when the positions explain themselves: the
first, the last, an ordinal the prompt names, the first k in order (top-k), or the last
k from the end (the top k of a list shown the other way round); a task
prompt that asks for a judgement (cheapest, best, most relevant...) makes every pick a
judgement, and using every item of a list is a rule only when its length is fixed. A
single item picked by judgement, or named by the task ("the price of the Widget"),
stays a template whose pointer goes through a *pick*: the compiler asks the small model
for that item's field. Other judgements are redone whole by the small model.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from services.compiler.dataflow.prompt import judgement_word, numbers, ordinals
from services.compiler.dataflow.sources import Pointer, Provenance
from services.compiler.dataflow.text import named
from services.executor import references
from services.executor.references import Path


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
    named: str | None = None  # the item's text the prompt names ("Widget"), if so


def list_position(path: Path) -> tuple[Path, int] | None:
    """(the path of the list, the index into it) for the first index in `path`."""
    for i, item in enumerate(path):
        if isinstance(item, int):
            return path[:i], item
    return None


Container = tuple[int, Path]  # a list: (the trace position of its output, its path there)


@dataclass(frozen=True)
class _Asked:
    """What the prompt says about picking: its judgement word, the positions it names,
    the counts it states."""

    prompt: str
    word: str | None
    ordinals: set[int]
    counts: set[int]


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
    picked: dict[Container, dict[int, None]] = {}  # the indexes in order of first use
    for pointer in uses:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, index = position
        picked.setdefault((pointer.step, prefix), {}).setdefault(index, None)
    asked = _Asked(prompt, judgement_word(prompt), ordinals(prompt), numbers(prompt))
    verdicts: dict[Container, ListVerdict] = {}
    for container, first_used in picked.items():
        step, prefix = container
        try:
            items = references.lookup(outputs[step], prefix)
        except (KeyError, IndexError, TypeError):
            verdicts[container] = ListVerdict(False, "the list is not in the output")
            continue
        verdicts[container] = _judge_list(
            list(first_used), items, asked, container in chosen, limits.get(step)
        )
    return verdicts


def _judge_list(
    indexes: list[int], items: Sequence[Any], asked: _Asked, chosen: bool, limit: int | None
) -> ListVerdict:
    """The verdict on the items `indexes` (in order of first use) of one list."""
    n = len(items)
    if n <= 1:
        return ListVerdict(True)
    if asked.word is not None or chosen:
        why = (
            f"picked from a list for a task that asks for a judgement ({asked.word!r})"
            if asked.word is not None
            else "picked from a list among options the task names"
        )
        pick = indexes[0] if len(indexes) == 1 else None
        return ListVerdict(False, why, pick=pick, size=n)
    name = _named_item(asked.prompt, items, indexes)
    if name is not None:
        # "The price of the Widget": the item is chosen by what it is, and where it
        # stands today (first, last) says nothing about where it stands tomorrow.
        pick = indexes[0] if len(indexes) == 1 else None
        why = f"the item the task names ({name!r}), wherever it stands"
        return ListVerdict(False, why, pick=pick, size=n, named=name)
    k = len(indexes)
    if k >= 2 and k == n and not (limit == k or k in asked.counts):
        return ListVerdict(False, f"uses all {n} items of a list whose length may change")
    if k >= 2 and indexes == list(range(k)):
        return ListVerdict(True, f"the first {k} items")
    if k >= 2 and indexes == [n - 1 - i for i in range(k)]:
        # The top k of a list shown the other way round (oldest first, for the newest):
        # counted from its end, they are the same items tomorrow, whatever its length.
        return ListVerdict(True, f"the last {k} items, from the end", last=True, size=n)
    if len(indexes) == 1:
        return _by_position(indexes[0], n, asked)
    return ListVerdict(
        False, f"picks items {[i + 1 for i in indexes]} in an order no rule explains"
    )


def _by_position(index: int, n: int, asked: _Asked) -> ListVerdict:
    """One item of `n`, picked where no judgement is asked for."""
    if index == 0:
        return ListVerdict(True, "the first item")
    if index + 1 in asked.ordinals:
        return ListVerdict(True, f"item {index + 1}, named by the task")
    if index == n - 1:
        return ListVerdict(True, "the last item", last=True, size=n)
    return ListVerdict(
        False, f"item {index + 1} of {n}, a position no rule explains", pick=index, size=n
    )


def _named_item(prompt: str, items: Sequence[Any], indexes: Sequence[int]) -> str | None:
    """A text of a used item the prompt names (whole words, a letter in it, 3+
    characters) and not every item holds: the item is the one the task asks about."""
    texts = [{leaf.strip() for _, leaf in references.leaves(item)} for item in items]
    for index in indexes:
        for text in sorted(texts[index]):
            if (
                len(text) >= 3
                and any(ch.isalpha() for ch in text)
                and not all(text in other for other in texts)
                and named(prompt, text)
            ):
                return text
    return None


def apply_verdicts(prov: Provenance, verdicts: Mapping[Container, ListVerdict]) -> Provenance:
    """A templated value whose list picks follow no rule (and are not a single pick a
    small-model step can redo) becomes a judgement; picks counted from the end (the last
    item, the last k) are rewritten to negative indexes (-1, -2, ...)."""
    if prov.kind != "template" or prov.template is None:
        return prov
    rewrite: dict[Pointer, Pointer] = {}
    for pointer in prov.template.pointers:
        position = list_position(pointer.path)
        if position is None:
            continue
        prefix, index = position
        verdict = verdicts.get((pointer.step, prefix))
        if verdict is None:
            continue
        if not verdict.ok and verdict.pick is None:
            return Provenance("judgement", verdict.why, sources=prov.sources)
        if verdict.last:
            rest = pointer.path[len(prefix) + 1 :]
            rewrite[pointer] = replace(pointer, path=(*prefix, index - verdict.size, *rest))
    if not rewrite:
        return prov
    return replace(prov, template=prov.template.with_pointers(rewrite))


def pick_container(
    pointer: Pointer, verdicts: Mapping[Container, ListVerdict]
) -> tuple[Container, Path] | None:
    """(the list, the path inside the item) when `pointer` goes through a picked item."""
    position = list_position(pointer.path)
    if position is None:
        return None
    prefix, _ = position
    verdict = verdicts.get((pointer.step, prefix))
    if verdict is None or verdict.ok or verdict.pick is None:
        return None
    return (pointer.step, prefix), pointer.path[len(prefix) + 1 :]


def needs_pick(prov: Provenance, verdicts: Mapping[Container, ListVerdict]) -> bool:
    """Does this templated value use an item only a small-model pick can find?"""
    if prov.template is None:
        return False
    return any(pick_container(p, verdicts) is not None for p in prov.template.pointers)
