"""The cost benchmark's corpus (services/dev/bench/corpus/), checked without a browser.

Every page renders on every layout; every task prompt parses in the stand-in model's
vocabulary; on every layout a full run finds what the task needs by the stand-in's own
candidate lists; a redesign breaks the recorded selector exactly for the tasks the
corpus says it breaks; and the content changes from edition to edition. Pages are read
by services/dev/bench/corpus_oracle.py (a small DOM and the stand-in's policy functions).
"""

from __future__ import annotations

import itertools
import math

import pytest

from services.compiler.step_checks import MIN_ITEMS_FRACTION
from services.dev.bench.corpus.site import LAYOUTS, Layout
from services.dev.bench.corpus.tasks import SITES, TASKS, CorpusTask, SiteServer
from services.dev.bench.corpus.townhall import FORMS
from services.dev.bench.corpus_oracle import (
    ORIGIN,
    Visit,
    expected_answer,
    found_list,
    found_records,
    list_page,
    parse,
    path_of,
    records,
    select,
    state,
)
from services.dev.standin.scripts import (
    CANDIDATE_RECORDS,
    MAX_EXTRACT_ITEMS,
    Cheapest,
    Extract,
    FillForm,
    ReadPage,
    TopN,
)
from services.dev.standin.vocabulary import parse_task

EDITIONS = range(10)

_IDS = [t.task_id for t in TASKS]

# --- the checks -----------------------------------------------------------------------------


def test_corpus_has_twenty_tasks_of_every_kind() -> None:
    assert len(TASKS) >= 20
    assert len(set(_IDS)) == len(_IDS)
    kinds = {t.kind for t in TASKS}
    assert kinds >= {"list", "click_list", "cheapest", "cheapest_detail", "form", "read"}
    assert any(t.breaks for t in TASKS) and any(not t.breaks for t in TASKS)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(SITES))
def test_every_page_renders_on_every_layout(name: str, layout: Layout) -> None:
    site = SITES[name]
    for edition in (0, 1, 7):
        paths = site.paths(edition)
        assert len(paths) >= 2
        for path in paths:
            status, body = site.render(path, layout, edition)
            assert status == 200, f"{name} {path} {layout}"
            doc = parse(body)
            assert select(doc, "title")[0].text, f"{name} {path} has no title"
            assert doc.lines(), f"{name} {path} shows nothing"
    assert site.render("/no/such/page", layout, 0)[0] == 404


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_every_prompt_parses_in_the_standin_vocabulary(task: CorpusTask) -> None:
    parsed = parse_task(task.prompt_for(ORIGIN))
    expected = {
        "list": TopN,
        "click_list": TopN,
        "cheapest": Cheapest,
        "cheapest_detail": Cheapest,
        "form": FillForm,
        "read": ReadPage,
        "extract": Extract,
    }[task.kind]
    assert isinstance(parsed, expected), parsed
    if isinstance(parsed, TopN):
        assert (parsed.click is not None) == (task.kind == "click_list")
    if isinstance(parsed, Cheapest):
        assert (parsed.detail is not None) == (task.kind == "cheapest_detail")
    assert path_of(task) != "/"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_a_full_run_answers_on_every_layout(task: CorpusTask, layout: Layout) -> None:
    for edition in (0, 5):
        answer = expected_answer(task, state(task, layout, edition))
        assert "None" not in answer and answer.count("\n") <= MAX_EXTRACT_ITEMS + 1


def _recorded(task: CorpusTask, server: SiteServer) -> tuple[str, int]:
    """The selector a run on this state records, and how many items it found."""
    if task.kind in ("cheapest", "cheapest_detail"):
        selector, rows = found_records(task, server)
        return selector, len(rows)
    selector, items = found_list(task, server)
    return selector, len(items)


def _count_on(task: CorpusTask, server: SiteServer, selector: str) -> int:
    if task.kind in ("cheapest", "cheapest_detail"):
        fields = dict(CANDIDATE_RECORDS)[selector]
        return len(records(Visit(server, "").get(path_of(task)), selector, fields))
    doc, _ = list_page(task, server)
    return len([n for n in select(doc, selector) if n.text])


@pytest.mark.parametrize("task", [t for t in TASKS if t.breaks], ids=lambda t: t.task_id)
def test_each_redesign_breaks_the_recorded_selector(task: CorpusTask) -> None:
    assert task.kind in ("list", "click_list", "cheapest", "cheapest_detail")
    for old, new in zip(task.layouts, task.layouts[1:], strict=False):
        selector, count = _recorded(task, state(task, old, 3))
        on_new = _count_on(task, state(task, new, 4), selector)
        needed = max(1, math.floor(count * MIN_ITEMS_FRACTION))  # the replay's MinItems
        assert on_new < needed, f"{task.task_id}: {selector} still finds {on_new} on {new}"
        assert _recorded(task, state(task, new, 4))[0] != selector


@pytest.mark.parametrize("task", [t for t in TASKS if not t.breaks], ids=lambda t: t.task_id)
def test_other_tasks_survive_the_redesign(task: CorpusTask) -> None:
    assert task.kind in ("form", "read", "extract")
    parsed = parse_task(task.prompt_for(ORIGIN))
    for layout in task.layouts:
        doc = Visit(state(task, layout, 2), "").get(path_of(task))
        if isinstance(parsed, FillForm):
            form = FORMS[path_of(task).strip("/")]
            names = {n.attrs["name"] for n in select(doc, "form")[0].walk() if "name" in n.attrs}
            assert names == {f.name for f in form.fields}
            assert set(parsed.fields) <= names
        if isinstance(parsed, Extract):
            assert len(select(doc, parsed.selector)) >= 4


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_content_changes_with_every_edition(task: CorpusTask) -> None:
    layout = task.layouts[0]
    answers = [expected_answer(task, state(task, layout, e)) for e in EDITIONS]
    changed = sum(a != b for a, b in itertools.pairwise(answers))
    assert changed == len(answers) - 1, answers


def test_schedules_change_layout_before_the_named_runs() -> None:
    task = next(t for t in TASKS if t.changes == (4, 8))
    assert [task.layout_at(r) for r in range(1, 11)] == ["v1"] * 3 + ["v2"] * 4 + ["v3"] * 3
    assert [task.layout_at(r, (3,)) for r in range(1, 5)] == ["v1", "v1", "v2", "v2"]
