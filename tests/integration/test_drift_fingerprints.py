"""The drift fingerprint is generic enough: on every site of the drift corpus
(services/dev/bench/drift), in both layouts, the extracts a compiled executor replays
(those of the careful stand-in's full run, services/dev/bench/drift/oracle.py) get a
fingerprint that stays the same from one clean edition to the next, apart from the
digits of its notes, and changes under every silent drift the site's tasks meet.

A stale copy is the exception: it changes only digits (an "Updated" date days before
the page's "Today is"), which the fingerprint carries in its notes but a comparison with
digits masked cannot see."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contracts.tools import Fingerprint
from services.dev.bench.drift.oracle import full_run
from services.dev.bench.drift.sites import SITES
from services.dev.bench.drift.state import STALE_DAYS, Layout, PageState
from services.dev.bench.drift.tasks import TASKS, DriftServer, DriftTask
from tests.browser_box import Browser, open_browser
from tests.integration.test_tools_service import nothing_left_behind  # noqa: F401

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.usefixtures("nothing_left_behind"),
]

# The drift kinds whose only trace is in the digits of the notes.
DIGITS_ONLY = {"stale_copy"}
# A compiled executor was recorded on one edition and replays the next.
RECORDED, REPLAYED = 8, 9
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")

Read = dict[str, Any]


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with open_browser(tmp_path) as browser:
        yield browser


def _key(read: Read) -> str:
    return json.dumps(read, sort_keys=True)


def _masked(found: Fingerprint) -> dict[str, Any]:
    """The fingerprint as a comparison with digits masked in the notes sees it."""
    plain = msgspec.to_builtins(found)
    plain["notes"] = [re.sub(r"\d+", "9", note) for note in found.notes]
    return dict(plain)


def _days_apart(found: Fingerprint) -> int:
    """How far apart the days the notes name are ("Today is ...", "Updated ...")."""
    days = [date(*map(int, m.groups())) for n in found.notes for m in _ISO_DAY.finditer(n)]
    assert len(days) >= 2, found.notes
    return (max(days) - min(days)).days


async def _fingerprints(
    browser: Browser, server: DriftServer, state: PageState, reads: dict[str, list[Read]]
) -> dict[tuple[str, str], Fingerprint]:
    """Each read's fingerprint on `state`, by (path, read): one navigation per page."""
    server.state = state
    found = {}
    for path, on_page in reads.items():
        assert (await browser("browser_navigate", url=f"{server.url}{path}")).ok
        for read in on_page:
            result = await browser("browser_extract", **read)
            assert result.ok and result.output, (state, read, result.error)
            assert result.metadata.fingerprint is not None
            found[(path, _key(read))] = result.metadata.fingerprint
    return found


def _reads_by_page(task_reads: dict[DriftTask, list[Read]]) -> dict[str, list[Read]]:
    """The tasks' reads, each once, by the page they read."""
    reads: dict[str, list[Read]] = {}
    for task, recorded in task_reads.items():
        on_page = reads.setdefault(task.path, [])
        on_page += [read for read in recorded if read not in on_page]
    return reads


Found = dict[str, dict[tuple[str, str], Fingerprint]]  # state -> (path, read) -> fingerprint


def _check(task: DriftTask, layout: Layout, keys: list[tuple[str, str]], got: Found) -> None:
    """The fingerprints of a task's reads: the same on a fresh edition, digits aside;
    another under each of its silent drifts (in its notes' digits only for DIGITS_ONLY)."""
    where = (layout, task.task_id)

    def masked(state: str) -> list[dict[str, Any]]:
        return [_masked(got[state][key]) for key in keys]

    assert masked("clean") == masked("recorded"), where
    for kind in task.drifts:
        if kind not in DIGITS_ONLY:
            assert masked(kind) != masked("recorded"), (*where, kind)
            continue
        # The stale copy's trace: its notes name days a week apart.
        assert masked(kind) == masked("recorded"), (*where, kind)
        for key in keys:
            assert _days_apart(got["recorded"][key]) == 0, (*where, key)
            assert _days_apart(got[kind][key]) == STALE_DAYS, (*where, key)


@pytest.mark.parametrize("site", list(SITES))
async def test_every_silent_drift_changes_the_fingerprint_and_a_new_edition_does_not(
    browser: Browser, site: str
) -> None:
    tasks = [t for t in TASKS if t.site == site]
    kinds = sorted({kind for t in tasks for kind in t.drifts})
    layouts: tuple[Layout, ...] = ("v1", "v2")
    for layout in layouts:
        recorded = PageState(RECORDED, layout)
        # What a compiled executor of each task replays: its full run's reads.
        task_reads = {t: full_run(t, recorded).reads for t in tasks}
        reads = _reads_by_page(task_reads)
        states = {"recorded": recorded, "clean": PageState(REPLAYED, layout)}
        states |= {kind: PageState(REPLAYED, layout, frozenset({kind})) for kind in kinds}
        got: Found = {}
        with DriftServer(SITES[site]) as server:
            for name, state in states.items():
                got[name] = await _fingerprints(browser, server, state, reads)
        for t in tasks:
            keys = [(t.path, _key(read)) for read in task_reads[t]]
            assert keys, (layout, t.task_id)
            _check(t, layout, keys, got)
