"""quality_check: a replay that runs cleanly but answers badly (a page of placeholders
behind the same selectors) is caught by the small model and falls back; without the
check the same replay is accepted."""

from __future__ import annotations

import html

import pytest

from contracts import subjects as s
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import TaskSpec
from services.dev.demo.pages import PageServer, Rendered
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, wait_finished
from tests.e2e.test_replay_lifecycle import SONNET, wait_compiled

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

HAIKU = "claude-haiku-5-5"


class Headlines(PageServer):
    """A news page whose headlines the test sets."""

    def __init__(self) -> None:
        super().__init__(name="headlines")
        self.titles = [f"Story {i}" for i in range(1, 9)]

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        if path != "/news":
            return 404, b"<html><body>not found</body></html>"
        items = "".join(
            f"<li><h2 class='headline'><a href='/news/{i}'>{html.escape(t)}</a></h2></li>"
            for i, t in enumerate(self.titles, 1)
        )
        return 200, f"<html><body><h1>News</h1><ul>{items}</ul></body></html>".encode()


async def run(rig: Rig, spec: TaskSpec, task_id: str) -> RunEvent:
    started = await rig.stack.bus.request(
        s.RUNS_START, StartRun(spec=spec, task_id=task_id), RunStarted
    )
    return await wait_finished(rig.stack.bus, started.run_id, timeout=90)


async def test_quality_check_catches_a_replay_of_placeholders(rig: Rig) -> None:
    with Headlines() as page:
        prompt = f"Open {page.url}/news and report the top 3 headlines"
        checked = TaskSpec(name="checked", prompt=prompt, quality_check=True)
        unchecked = TaskSpec(name="unchecked", prompt=prompt)
        for spec in (checked, unchecked):
            first = await run(rig, spec, spec.name)
            assert first.source == "full_llm" and first.status == "completed", first.error
            await wait_compiled(rig.stack.bus, spec.name, 1)

        # New stories: the replay passes the check, which costs small-model tokens only.
        page.titles = [f"Fresh story {i}" for i in range(1, 9)]
        good = await run(rig, checked, "checked")
        assert good.source == "executor" and good.status == "completed", good.error
        assert (
            good.result == "Top 3 headlines:\n1. Fresh story 1\n2. Fresh story 2\n3. Fresh story 3"
        )
        assert SONNET not in good.tokens and good.tokens[HAIKU].calls >= 1
        assert good.cost_usd > 0

        # The page now shows placeholders behind the same selectors.
        page.titles = ["Loading…"] * 8
        unnoticed = await run(rig, unchecked, "unchecked")
        assert unnoticed.source == "executor" and not unnoticed.fell_back
        assert unnoticed.result == "Top 3 headlines:\n1. Loading…\n2. Loading…\n3. Loading…"

        caught = await run(rig, checked, "checked")
        assert caught.fell_back and caught.source == "full_llm"
        assert caught.replay is not None and not caught.replay.ok
        assert (caught.replay.reason or "").startswith("quality check: listed items repeat")
        names = [e.event for e in await run_events(rig.stack.bus, caught.run_id)]
        assert names == ["requested", "started", "replay_failed", "completed"]
