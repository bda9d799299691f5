"""Healing a broken step end to end (real NATS, real Chromium, the stand-in over HTTP): a
click whose link is gone is neither matched by text nor healed onto a look-alike control
the page plants in its place; the run falls back, and the replay acted on nothing but
what it recorded."""

from __future__ import annotations

import html

import pytest

from contracts import subjects as s
from contracts.tasks import TaskSpec
from contracts.tools import ToolEvent
from services.dev.demo.pages import PageServer, Rendered
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, stored
from tests.e2e.test_quality_check import run
from tests.e2e.test_replay_lifecycle import wait_compiled

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]


class Sections(PageServer):
    """A front page linking to its "Sports" section. Redesigned (`lookalike`), that link
    is gone and a "Sports betting" link stands where it was: its name contains the old
    one's, which a click by text alone would take."""

    def __init__(self) -> None:
        super().__init__(name="sections")
        self.lookalike = False

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        if path == "/news":
            links = (
                [("/bets", "Sports betting")] if self.lookalike else [("/news/sports", "Sports")]
            )
            nav = "".join(f"<a href='{h}'>{html.escape(t)}</a> " for h, t in links)
            return 200, f"<html><body><nav>{nav}</nav><h1>News</h1></body></html>".encode()
        titles = {"/news/sports": "Match report", "/bets": "Odds for tonight"}.get(path)
        if titles is None:
            return 404, b"<html><body>not found</body></html>"
        items = "".join(f"<li><h2 class='headline'>{titles} {i}</h2></li>" for i in range(1, 6))
        return 200, f"<html><body><ul>{items}</ul></body></html>".encode()


async def test_a_click_is_never_healed_onto_a_look_alike(rig: Rig) -> None:
    with Sections() as site:
        prompt = f"Open {site.url}/news, click Sports, and report the top 3 headlines"
        spec = TaskSpec(name="sports", prompt=prompt)
        first = await run(rig, spec, "sports")
        assert first.source == "full_llm" and first.status == "completed", first.error
        await wait_compiled(rig.stack.bus, "sports", 1)

        site.lookalike = True
        broken = await run(rig, spec, "sports")
        replay = broken.replay
        assert replay is not None and not replay.ok and broken.fell_back
        # The small model picked the look-alike (it shares a word); rote refused it.
        assert "not healed: the candidate is named 'Sports betting'" in (replay.reason or "")
        assert replay.healed_steps == []
        names = [e.event for e in await run_events(rig.stack.bus, broken.run_id)]
        assert names == ["requested", "started", "replay_failed", "completed"]
        calls = await stored(
            rig.stack.bus, s.STREAM_ACTIVITY, s.tool_event(broken.run_id, "started"), ToolEvent
        )
        clicks = [c.input for c in calls if c.source == "executor" and c.tool == "browser_click"]
        # The recorded click (tried again once, as a step is), and no other.
        # Asked exactly: the recorded control was named "Sports", nothing else is it.
        assert clicks and all(c == {"text": "Sports", "exact": True} for c in clicks)
