"""A token handed back in a URL fragment (OAuth implicit flow) through browser_navigate:
masked in the tool's events like a credential query parameter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from services.kernel.bus import Bus
from services.kernel.secrets import MASK, redact_value
from services.kernel.settings import Settings
from tests.integration.test_tools_service import (  # noqa: F401
    Tools,
    _tool_events,
    nothing_left_behind,
    running,
)
from tests.local_site import QuietHandler, serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

TOKEN = "ya29.SECRETFRAGTOKEN"
FRAGMENT = f"#access_token={TOKEN}&token_type=bearer"


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/authorize":  # the provider sends the token back in the fragment
            self.send_response(302)
            self.send_header("Location", f"/cb{FRAGMENT}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"<title>Signed in</title><p>welcome</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[str]:
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def tools(bus: Bus, settings: Settings, tmp_path: Path) -> AsyncIterator[Tools]:
    async with running(bus, settings, tmp_path) as service:
        yield service


async def test_a_fragment_token_is_masked_in_events(tools: Tools, site: str) -> None:
    run_id = "run-fragment"
    nav = await tools.call("browser_navigate", {"url": f"{site}/authorize"}, run_id=run_id)
    landed = f"{site}/cb{FRAGMENT}"
    shown = f"{site}/cb#access_token={MASK}&token_type=bearer"
    # The reply to the model keeps it, as it keeps a ?access_token= (see `redact`).
    assert nav.ok and nav.output["url"] == landed and nav.metadata.url == landed
    # What a transcript or log keeps of that reply is masked in full.
    assert TOKEN not in msgspec.json.encode(redact_value(msgspec.to_builtins(nav))).decode()

    events = await _tool_events(tools.bus, run_id, 2)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert TOKEN.encode() not in stored
    finished = events[1][1]
    assert finished.output["url"] == shown
    assert finished.metadata is not None and finished.metadata.url == shown
