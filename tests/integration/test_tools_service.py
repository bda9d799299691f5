"""The tools service end to end: real NATS, real Chromium, pages served on localhost.

Each test starts the service on a fresh NATS and calls it the way the runner does, with
ExecTool requests on rote.api.tools.exec.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import signal
import struct
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlparse

import anyio
import msgspec
import nats.errors
import pytest

from contracts import subjects as s
from contracts.executors import ResultStep, ToolStep
from contracts.tasks import TaskSpec
from contracts.tools import (
    CloseSession,
    ExecTool,
    ListTools,
    SessionClosed,
    ToolEvent,
    ToolList,
    ToolResult,
)
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.embedded_nats import free_port
from services.kernel.errors import RemoteError
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import MASK, register_secret
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.runner.adapters import bus_ports
from services.runner.ports import RunScope
from services.runner.replay import Replayer
from services.runner.transcript import TranscriptRecorder
from services.tools import local
from services.tools import service as tools_service
from services.tools.specs import SPECS
from tests.hand_built_replay import hand_built_executor
from tests.local_site import QuietHandler, serve
from tests.orphan_call import alive, orphaned_call

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

# The whole catalogue (its names are pinned in tests/unit/test_tools_specs.py).
ALL_TOOLS = list(SPECS)

# --- a small site ------------------------------------------------------------------------

HOME = """<!doctype html><title>Shop</title>
<h1>Products</h1>
<ul id="products">
  <li class="item" data-id="p1"><a class="name" href="/p/1">Widget</a>
      <span class="price">$3</span></li>
  <li class="item" data-id="p2"><a class="name" href="/p/2">Gadget</a>
      <span class="price">$5</span></li>
  <li class="item" data-id="p3"><a class="name" href="/p/3">Doohickey</a></li>
</ul>
<p style="display:none">hidden text</p>
<a href="/page2">Next page</a>
<a href="/page2" target="_blank">Open in a new tab</a>
"""

FORM = """<!doctype html><title>Sign up</title>
<form action="/submit" method="post">
  <input name="name">
  <label for="email">Email</label><input id="email" name="email_address">
  <select id="colour" name="colour">
    <option value="r">Red</option><option value="g">Green</option>
  </select>
  <label><input type="checkbox" name="subscribe" value="yes"> Subscribe</label>
  <button type="submit">Sign up</button>
</form>
"""

# A password field whose id says nothing, and a PIN field that is plain text.
LOGIN = """<!doctype html><title>Sign in</title>
<form action="/submit" method="post">
  <input id="user" name="user">
  <input id="field2" name="field2" type="password">
  <input id="pin" name="pin">
  <button type="submit">Sign in</button>
</form>
"""

SEARCH = """<!doctype html><title>Search</title>
<form action="/results"><input id="q" name="q"></form>
"""

# A password-reset mail: its link works only with the token it carries.
RESET_TOKEN = "Reset-7731-tok"
MAIL = f"""<!doctype html><title>Mail</title>
<a id="reset" href="/reset?token={RESET_TOKEN}&amp;u=ada">Reset your password</a>
"""


class Gate:
    """A page that loads only once the test opens it, and tells when it was asked for:
    a page in flight for as long as the test needs, however slow the machine."""

    def __init__(self) -> None:
        self.name = uuid.uuid4().hex
        self.asked = threading.Event()
        self.opened = threading.Event()

    def url(self, site: str) -> str:
        return f"{site}/held?gate={self.name}"

    async def wait_asked(self, timeout: float = 30.0) -> None:
        with anyio.fail_after(timeout):
            while not self.asked.is_set():
                await anyio.sleep(0.05)


GATES: dict[str, Gate] = {}


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        match url.path:
            case "/":
                self.send_html(HOME)
            case "/page2":
                self.send_html("<title>Page two</title><h1>Second page</h1>")
            case "/form":
                self.send_html(FORM)
            case "/search":
                self.send_html(SEARCH)
            case "/login":
                self.send_html(LOGIN)
            case "/mail":
                self.send_html(MAIL)
            case "/reset":
                valid = query.get("token") == [RESET_TOKEN]
                self.send_html(
                    f"<title>Reset</title><p id='state'>{'valid' if valid else 'bad'}</p>"
                )
            case "/results":
                q = html.escape(query.get("q", [""])[0])
                self.send_html(f"<title>Results</title><h1>Results for {q}</h1>")
            case "/setcookie":
                who = query.get("who", ["nobody"])[0]
                self.send_html("<title>Set</title>ok", headers={"Set-Cookie": f"who={who}; Path=/"})
            case "/cookies":
                cookie = html.escape(self.headers.get("Cookie") or "none")
                self.send_html(f"<title>Cookies</title><p id='cookie'>{cookie}</p>")
            case "/slow":
                time.sleep(float(query.get("s", ["5"])[0]))
                self.send_html("<title>Slow</title>finally")
            case "/held":
                gate = GATES[query["gate"][0]]
                gate.asked.set()
                gate.opened.wait(120)
                self.send_html("<title>Slow</title>finally")
            case "/tall":
                self.send_html("<title>Tall</title><div style='height:5000px'>top</div>")
            case "/missing":
                self.send_html("<title>Nope</title>not here", status=404)
            case "/bigtitle":  # alone bigger than a NATS payload
                self.send_html(f"<title>{'T' * 1_100_000}</title><p>big</p>")
            case _:
                self.send_html("<title>?</title>", status=404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        rows = "".join(
            f"<li id='{html.escape(k)}'>{html.escape(', '.join(v))}</li>"
            for k, v in sorted(form.items())
        )
        self.send_html(f"<title>Thanks</title><h1>Thanks</h1><ul>{rows}</ul>")


@pytest.fixture
def site() -> Iterator[str]:
    with serve(_Handler) as url:
        yield url


@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    GATES[held.name] = held
    try:
        yield held
    finally:
        held.opened.set()  # a page still held must not hold the site's thread
        del GATES[held.name]


# --- the service -------------------------------------------------------------------------


@dataclass
class Tools:
    bus: Bus
    settings: Settings
    root: Path

    async def call(
        self,
        tool: str,
        input: dict[str, Any] | None = None,
        *,
        run_id: str = "run-a",
        allowed: list[str] | None = None,
        timeout_s: float = 15.0,
        step: int | None = None,
        call_id: str | None = None,
        attempt: int = 1,
    ) -> ToolResult:
        request = ExecTool(
            run_id=run_id,
            task_id="task-1",
            allowed_tools=ALL_TOOLS if allowed is None else allowed,
            tool=tool,
            input=input or {},
            timeout_s=timeout_s,
            step=step,
            call_id=call_id,
            attempt=attempt,
        )
        return await self.bus.request(s.TOOLS_EXEC, request, ToolResult, timeout=timeout_s + 15)

    async def refused(self, tool: str, input: dict[str, Any], **kw: Any) -> RemoteError:
        with pytest.raises(RemoteError) as caught:
            await self.call(tool, input, **kw)
        return caught.value


@asynccontextmanager
async def running(bus: Bus, settings: Settings, root: Path) -> AsyncIterator[Tools]:
    await ensure_streams(bus.js)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings,
            bus=bus,
            task_group=tg,
            services=("tools",),
            nats_url=bus.url,
            embedded_nats=False,
        )
        await tg.start(tools_service.serve, ctx)
        yield Tools(bus, settings, root)
        tg.cancel_scope.cancel()


@pytest.fixture
async def tools(bus: Bus, settings: Settings, tmp_path: Path) -> AsyncIterator[Tools]:
    root = tmp_path / "files"
    root.mkdir()
    settings = settings.with_(allowed_commands=("echo **",), path_roots=(str(root),))
    async with running(bus, settings, root) as service:
        yield service


# --- browser tools -----------------------------------------------------------------------


async def test_list_returns_anthropic_tool_definitions(tools: Tools) -> None:
    reply = await tools.bus.request(s.TOOLS_LIST, ListTools(), ToolList)
    assert [t.name for t in reply.tools] == ALL_TOOLS
    assert all(t.input_schema["type"] == "object" for t in reply.tools)
    narrowed = await tools.bus.request(s.TOOLS_LIST, ListTools(names=["shell_exec"]), ToolList)
    assert [t.name for t in narrowed.tools] == ["shell_exec"]


async def test_navigate_then_extract(tools: Tools, site: str) -> None:
    nav = await tools.call("browser_navigate", {"url": site + "/"})
    assert nav.ok, nav.error
    assert nav.output == {"url": site + "/", "status": 200, "title": "Shop"}
    assert (nav.metadata.url, nav.metadata.http_status, nav.metadata.title) == (
        site + "/",
        200,
        "Shop",
    )

    names = await tools.call("browser_extract", {"selector": "li.item .name"})
    assert names.ok and names.output == ["Widget", "Gadget", "Doohickey"]
    assert names.metadata.item_count == 3 and not names.truncated

    hrefs = await tools.call("browser_extract", {"selector": "a.name", "attribute": "href"})
    # Absolute, as browser_navigate takes them.
    assert hrefs.output == [f"{site}/p/1", f"{site}/p/2", f"{site}/p/3"]

    rows = await tools.call(
        "browser_extract",
        {
            "selector": "li.item",
            "fields": {
                "name": ".name",
                "price": ".price",
                "link": "a@href",
                "id": "@data-id",
            },
            "limit": 2,
        },
    )
    assert rows.ok
    assert rows.output == [
        {"name": "Widget", "price": "$3", "link": f"{site}/p/1", "id": "p1"},
        {"name": "Gadget", "price": "$5", "link": f"{site}/p/2", "id": "p2"},
    ]
    assert rows.metadata.item_count == 2

    # A field that matches nothing inside an item is null, not an error.
    last = await tools.call(
        "browser_extract", {"selector": "li.item", "fields": {"name": ".name", "price": ".price"}}
    )
    assert last.output[2] == {"name": "Doohickey", "price": None}

    # No match at all: ok, empty, count 0.
    none = await tools.call("browser_extract", {"selector": "table.nothing td"})
    assert none.ok and none.output == [] and none.metadata.item_count == 0


async def test_read_page_is_visible_text(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/"})
    page = await tools.call("browser_read_page")
    assert page.ok and isinstance(page.output, str)
    assert page.output.startswith("Products")
    assert "Widget $3" in page.output and "Next page" in page.output
    assert "hidden text" not in page.output
    assert page.metadata.url == site + "/" and page.metadata.title == "Shop"


async def test_click_by_text_follows_the_link(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/"})
    clicked = await tools.call("browser_click", {"text": "Next page"})
    assert clicked.ok, clicked.error
    assert clicked.output == {"url": site + "/page2", "title": "Page two"}
    assert clicked.metadata.http_status == 200
    heading = await tools.call("browser_extract", {"selector": "h1"})
    assert heading.output == ["Second page"]

    # A link that opens a new tab: the run follows it there.
    await tools.call("browser_navigate", {"url": site + "/"})
    popup = await tools.call("browser_click", {"text": "Open in a new tab"})
    assert popup.ok and popup.output == {"url": site + "/page2", "title": "Page two"}
    assert popup.metadata.http_status == 200
    assert (await tools.call("browser_extract", {"selector": "h1"})).output == ["Second page"]

    # By selector too.
    await tools.call("browser_navigate", {"url": site + "/"})
    by_css = await tools.call("browser_click", {"selector": "li.item[data-id=p2] a"})
    assert by_css.ok and by_css.output["url"] == site + "/p/2"
    assert by_css.metadata.http_status == 404  # the site has no product pages


async def test_fill_form_submits_and_the_next_page_shows_the_values(
    tools: Tools, site: str
) -> None:
    await tools.call("browser_navigate", {"url": site + "/form"})
    result = await tools.call(
        "browser_fill_form",
        {
            "fields": {
                "name": "Ada Lovelace",  # a field name
                "Email": "ada@example.com",  # a label
                "#colour": "Green",  # CSS; an option label
                "subscribe": True,  # a checkbox
            }
        },
    )
    assert result.ok, result.error
    assert result.output == {"url": site + "/submit", "title": "Thanks"}
    assert result.metadata.http_status == 200
    values = await tools.call(
        "browser_extract", {"selector": "li", "fields": {"field": "@id", "value": ""}}
    )
    assert {row["field"]: row["value"] for row in values.output} == {
        "name": "Ada Lovelace",
        "email_address": "ada@example.com",
        "colour": "g",
        "subscribe": "yes",
    }


async def test_fill_form_without_submit_and_an_unknown_field(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/form"})
    kept = await tools.call("browser_fill_form", {"fields": {"name": "x"}, "submit": False})
    assert kept.ok and kept.output["url"] == site + "/form"
    missing = await tools.call("browser_fill_form", {"fields": {"Shoe size": "9"}}, timeout_s=3)
    assert not missing.ok and missing.error is not None
    assert missing.error.code == "element_not_found" and "Shoe size" in missing.error.message


async def test_type_and_submit(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/search"})
    typed = await tools.call(
        "browser_type", {"selector": "#q", "text": "blue shoes", "submit": True}
    )
    assert typed.ok, typed.error
    assert typed.output["url"] == site + "/results?q=blue+shoes"
    assert typed.output["title"] == "Results"
    heading = await tools.call("browser_extract", {"selector": "h1"})
    assert heading.output == ["Results for blue shoes"]


async def test_scroll(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/tall"})
    down = await tools.call("browser_scroll", {"direction": "down", "amount": 500})
    assert down.ok and down.output == {"scroll_y": 500, "at_end": False}
    up = await tools.call("browser_scroll", {"direction": "up", "amount": 200})
    assert up.output == {"scroll_y": 300, "at_end": False}
    screen = await tools.call("browser_scroll", {"direction": "down"})
    assert screen.output["scroll_y"] > 300
    bottom = await tools.call("browser_scroll", {"direction": "down", "amount": 10_000})
    assert bottom.output["at_end"] and bottom.output["scroll_y"] > 4000


async def test_screenshot_is_a_png_stored_by_sha256(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/"})
    shot = await tools.call("browser_screenshot")
    assert shot.ok, shot.error
    path = Path(shot.output["path"])
    data = await anyio.Path(path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == shot.output["sha256"]
    assert shot.metadata.blob == f"sha256:{shot.output['sha256']}"
    assert path.is_relative_to(tools.settings.data_dir)
    # It decodes as a PNG of the viewport's size.
    assert decode_png_size(data) == (1280, 800)


def decode_png_size(data: bytes) -> tuple[int, int]:
    """Reads a PNG whole, as a viewer would (signature, every chunk's CRC, the image data
    inflated to exactly one filtered row per line), and gives its width and height."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks: list[tuple[bytes, bytes]] = []
    at = 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        at += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert depth == 8 and interlace == 0
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(pixels) == height * (1 + width * channels)
    assert all(pixels[row * (1 + width * channels)] <= 4 for row in range(height))  # filters
    return width, height


async def test_two_runs_at_once_do_not_share_cookies(tools: Tools, site: str) -> None:
    seen: dict[str, list[str]] = {}

    async def run(run_id: str, who: str | None) -> None:
        if who:
            await tools.call(
                "browser_navigate", {"url": f"{site}/setcookie?who={who}"}, run_id=run_id
            )
        await tools.call("browser_navigate", {"url": site + "/cookies"}, run_id=run_id)
        seen[run_id] = (
            await tools.call("browser_extract", {"selector": "#cookie"}, run_id=run_id)
        ).output

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "run-alice", "alice")
        tg.start_soon(run, "run-bob", "bob")
        tg.start_soon(run, "run-nobody", None)
    assert seen == {
        "run-alice": ["who=alice"],
        "run-bob": ["who=bob"],
        "run-nobody": ["none"],
    }


async def test_a_slow_page_does_not_hold_up_other_runs(tools: Tools, site: str, gate: Gate) -> None:
    done: list[str] = []

    async def slow() -> None:
        # Loads only once the test opens it (below): slow for as long as the fast run takes.
        url = gate.url(site)
        await tools.call("browser_navigate", {"url": url}, run_id="run-slow", timeout_s=90)
        done.append("slow")

    async def fast() -> None:
        await tools.call("browser_navigate", {"url": site + "/"}, run_id="run-fast")
        done.append("fast")

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await gate.wait_asked()  # the slow page is loading
        tg.start_soon(fast)
        with anyio.fail_after(30):  # the fast run is done while the slow page still loads
            while not done:
                await anyio.sleep(0.05)
        gate.opened.set()
    assert done == ["fast", "slow"]


async def test_close_session_forgets_the_run(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": f"{site}/setcookie?who=carol"}, run_id="run-c")
    closed = await tools.bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id="run-c"), SessionClosed
    )
    assert closed == SessionClosed(run_id="run-c", closed=True)
    again = await tools.bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id="run-c"), SessionClosed
    )
    assert again.closed is False
    # The run's next call gets a fresh context: no cookie.
    await tools.call("browser_navigate", {"url": site + "/cookies"}, run_id="run-c")
    cookie = await tools.call("browser_extract", {"selector": "#cookie"}, run_id="run-c")
    assert cookie.output == ["none"]


async def test_a_runner_that_lost_the_run_does_not_close_the_next_deliverys_session(
    tools: Tools, site: str
) -> None:
    """Delivery 1's runner stalled and delivery 2 took the run over (on another runner):
    delivery 1 closing its session at the end must not close delivery 2's page under it."""
    await tools.call(
        "browser_navigate", {"url": f"{site}/setcookie?who=dave"}, run_id="run-d", attempt=2
    )
    late = await tools.bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id="run-d", attempt=1), SessionClosed
    )
    assert late.closed is False
    await tools.call("browser_navigate", {"url": site + "/cookies"}, run_id="run-d", attempt=2)
    cookie = await tools.call("browser_extract", {"selector": "#cookie"}, run_id="run-d", attempt=2)
    assert cookie.output == ["who=dave"]  # the same session, still browsing
    own = await tools.bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id="run-d", attempt=2), SessionClosed
    )
    assert own.closed is True


# --- failures and refusals -------------------------------------------------------------


async def _still_serving(tools: Tools, site: str) -> None:
    nav = await tools.call("browser_navigate", {"url": site + "/page2"})
    assert nav.ok and nav.output["title"] == "Page two"


async def test_tool_failures_are_results_the_model_sees(tools: Tools, site: str) -> None:
    await tools.call("browser_navigate", {"url": site + "/"})

    missing = await tools.call("browser_click", {"selector": "#does-not-exist"}, timeout_s=2)
    assert not missing.ok and missing.error is not None
    assert missing.error.code == "element_not_found"
    assert "#does-not-exist" in missing.error.message
    assert missing.metadata.url == site + "/"
    await _still_serving(tools, site)

    syntax = await tools.call("browser_extract", {"selector": "li[[["})
    assert not syntax.ok and syntax.error is not None
    assert syntax.error.code == "invalid_selector"
    await _still_serving(tools, site)

    closed_port = free_port()
    unreachable = await tools.call("browser_navigate", {"url": f"http://127.0.0.1:{closed_port}/"})
    assert not unreachable.ok and unreachable.error is not None
    assert unreachable.error.code == "navigation_failed"
    assert "ERR_CONNECTION_REFUSED" in unreachable.error.message
    await _still_serving(tools, site)

    # Cut off at the call's timeout: a call that waited out the page's 10 s would have
    # loaded it (ok), and the caller's own wait (16.5 s) would raise, not answer.
    slow = await tools.call("browser_navigate", {"url": site + "/slow?s=10"}, timeout_s=1.5)
    assert not slow.ok and slow.error is not None
    assert slow.error.code == "timeout"
    await _still_serving(tools, site)

    # An HTTP error page is a page: ok, with its status.
    not_found = await tools.call("browser_navigate", {"url": site + "/missing"})
    assert not_found.ok and not_found.output["status"] == 404


async def test_refusals_are_structured_errors_and_nothing_runs(tools: Tools, site: str) -> None:
    marker = tools.root / "marker.txt"
    cases: list[tuple[str, dict[str, Any], dict[str, Any], str, str | None]] = [
        ("shell_exec", {"command": "echo hi"}, {"allowed": ["browser_navigate"]},
         "tool_not_allowed", "tool"),
        ("file_write", {"path": str(marker), "content": "x"}, {"allowed": []},
         "tool_not_allowed", "tool"),
        ("shell_exec", {"command": f"touch {marker}"}, {}, "command_denied", "input.command"),
        ("shell_exec", {"command": f"echo hi; touch {marker}"}, {"allowed": ["file_read"]},
         "tool_not_allowed", "tool"),
        ("file_read", {"path": "/etc/hostname"}, {}, "path_denied", "input.path"),
        ("file_read", {"path": "../outside.txt"}, {}, "path_denied", "input.path"),
        ("file_write", {"path": "sub/../../escape.txt", "content": "x"}, {},
         "path_denied", "input.path"),
        ("browser_teleport", {}, {"allowed": ["browser_teleport"]}, "not_found", "tool"),
        ("browser_navigate", {"url": "file:///etc/passwd"}, {}, "invalid_request", "input.url"),
        ("browser_extract", {"selector": "li", "limit": "ten"}, {}, "invalid_request",
         "input.limit"),
        # exec cannot pass a NUL: refused, not a failed spawn answered `internal`.
        ("shell_exec", {"command": f"echo a\x00b; touch {marker}"}, {}, "invalid_request",
         "input.command"),
        # Deeper than Python's stack would let the input be walked.
        ("noop", {"echo": _nested(600)}, {}, "invalid_request", "input"),
    ]  # fmt: skip
    for tool, input, kw, code, field in cases:
        err = await tools.refused(tool, input, **kw)
        assert (err.code, err.info.field) == (code, field), (tool, input)
        assert err.status in (400, 403, 404)
        await _still_serving(tools, site)
    assert not marker.exists()
    assert not (tools.root.parent / "escape.txt").exists()


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_symlink_escape_is_refused(tools: Tools, site: str) -> None:
    outside = tools.root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    os.symlink(outside / "secret.txt", tools.root / "innocent.txt")
    os.symlink(outside, tools.root / "linkdir")
    for path in ["innocent.txt", str(tools.root / "linkdir" / "secret.txt")]:
        err = await tools.refused("file_read", {"path": path})
        assert err.code == "path_denied"
    err = await tools.refused("file_write", {"path": "linkdir/new.txt", "content": "x"})
    assert err.code == "path_denied"
    assert not (outside / "new.txt").exists()
    await _still_serving(tools, site)


async def test_a_replayed_call_whose_tool_was_disallowed_is_refused(tools: Tools) -> None:
    # An executor step compiled while the task allowed file_write, replayed after the
    # task dropped it: coming from an executor gives the call no say over the policy.
    marker = tools.root / "replayed.txt"
    request = ExecTool(
        run_id="run-replayed",
        task_id="task-1",
        allowed_tools=["file_read", "browser_navigate"],
        tool="file_write",
        input={"path": "replayed.txt", "content": "x"},
        step=0,
        source="executor",
        call_id="a1-x0",
    )
    with pytest.raises(RemoteError) as caught:
        await tools.bus.request(s.TOOLS_EXEC, request, ToolResult, timeout=15)
    assert (caught.value.code, caught.value.status) == ("tool_not_allowed", 403)
    assert caught.value.info.field == "tool"
    assert not marker.exists()
    (_, started), (_, finished) = await _tool_events(tools.bus, "run-replayed", 2)
    assert (started.source, finished.source) == ("executor", "executor")
    assert finished.ok is False and finished.output is None
    assert finished.error is not None and finished.error.code == "tool_not_allowed"
    # The very same call with the tool allowed runs: it was the policy that refused.
    allowed = msgspec.structs.replace(request, allowed_tools=["file_write"], call_id="a2-x0")
    result = await tools.bus.request(s.TOOLS_EXEC, allowed, ToolResult, timeout=15)
    assert result.ok and marker.read_text() == "x"


async def test_a_replay_fails_at_the_step_whose_tool_left_allowed_tools(tools: Tools) -> None:
    """The runner's replay through the real tools service: the executor still has a
    file_write step, the task no longer allows file_write."""
    (tools.root / "in.txt").write_text("today")
    executor = hand_built_executor(
        "task-1",
        [
            ToolStep(index=0, tool="file_read", input={"path": "in.txt"}),
            ToolStep(
                index=1,
                tool="file_write",
                input={"path": "out.txt", "content": "{{step_0}}"},
                templated=True,
            ),
            ResultStep(index=2, mode="template", template="copied {{step_0}}"),
        ],
    )
    spec = TaskSpec(name="copy", prompt="copy in.txt to out.txt", allowed_tools=["file_read"])
    run_id = "run-replay-policy"
    scope = RunScope(
        spec=spec,
        ports=bus_ports(tools.bus),
        run_id=run_id,
        task_id="task-1",
        attempt=1,
        transcript=TranscriptRecorder(run_id, "task-1"),
    )
    result = await Replayer(executor, scope, backoff_s=0.0).run()
    assert not result.ok and result.failed_step == 1
    assert result.reason is not None and "tool_not_allowed" in result.reason
    assert not (tools.root / "out.txt").exists()
    # Step 0 ran; step 1 was refused once (a refusal is not retried) and never ran.
    events = [e for _, e in await _tool_events(tools.bus, run_id, 4)]
    assert [(e.step, e.tool, e.event) for e in events] == [
        (0, "file_read", "started"),
        (0, "file_read", "finished"),
        (1, "file_write", "started"),
        (1, "file_write", "finished"),
    ]
    assert all(e.source == "executor" for e in events)
    assert events[1].ok and events[1].output == "today"
    refused = events[3]
    assert refused.ok is False and refused.duration_ms == 0
    assert refused.error is not None and refused.error.code == "tool_not_allowed"


async def test_local_tools_inside_the_policy(tools: Tools) -> None:
    echoed = await tools.call("shell_exec", {"command": "echo hello world"})
    assert echoed.ok
    assert echoed.output == {"exit_code": 0, "stdout": "hello world\n", "stderr": ""}
    assert echoed.metadata.exit_code == 0

    written = await tools.call("file_write", {"path": "notes/a.txt", "content": "héllo"})
    assert written.ok
    assert written.output == {"path": str(tools.root.resolve() / "notes" / "a.txt"), "bytes": 6}
    read = await tools.call("file_read", {"path": str(tools.root / "notes" / "a.txt")})
    assert read.ok and read.output == "héllo"
    missing = await tools.call("file_read", {"path": "nope.txt"})
    assert not missing.ok and missing.error is not None and missing.error.code == "not_found"


async def test_malformed_requests_are_structured(tools: Tools, site: str) -> None:
    for data, code in [
        (b"{nope", "malformed"),
        (b'{"run_id": "r", "tool": "browser_navigate"}', "invalid_request"),  # no allowed_tools
        (b'{"run_id": "has.dot", "allowed_tools": [], "tool": "x"}', "invalid_request"),
    ]:
        msg = await tools.bus.nc.request(s.TOOLS_EXEC, data, timeout=5)
        assert msg.headers and "Nats-Service-Error" in msg.headers
        assert json.loads(msg.data)["error"]["code"] == code
    await _still_serving(tools, site)


async def test_without_chromium_browser_calls_are_unavailable(
    bus: Bus, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", "/nonexistent")
    root = tmp_path / "files"
    root.mkdir()
    settings = settings.with_(chromium="/no/such/chromium", path_roots=(str(root),))
    async with running(bus, settings, root) as tools:
        err = await tools.refused("browser_navigate", {"url": "http://127.0.0.1/"})
        assert (err.code, err.status) == ("unavailable", 503)
        assert "ROTE_CHROMIUM" in err.message
        # Local tools do not need a browser.
        written = await tools.call("file_write", {"path": "a.txt", "content": "x"})
        assert written.ok


# --- events ------------------------------------------------------------------------------


async def _tool_events(
    bus: Bus, run_id: str, expected: int
) -> list[tuple[dict[str, str], ToolEvent]]:
    sub = await bus.js.subscribe(
        s.tool_event(run_id, "started").rsplit(".", 1)[0] + ".*", ordered_consumer=True
    )
    out = []
    try:
        for _ in range(expected):
            msg = await sub.next_msg(timeout=5)
            out.append((dict(msg.headers or {}), decode(msg.data, ToolEvent)))
        with pytest.raises(nats.errors.TimeoutError):  # nothing more than expected
            await sub.next_msg(timeout=0.3)
    finally:
        await sub.unsubscribe()
    return out


async def test_every_call_publishes_started_then_finished(tools: Tools, site: str) -> None:
    run_id = "run-events"
    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("browser_navigate", {"url": site + "/"}, {}),
        ("browser_extract", {"selector": "li.item .name"}, {}),
        ("browser_click", {"selector": "#nope"}, {"timeout_s": 3}),  # fails
        ("shell_exec", {"command": "echo hi"}, {"allowed": ["browser_navigate"]}),  # refused
        ("browser_read_page", {}, {}),
    ]
    for step, (tool, input, kw) in enumerate(calls):
        with contextlib.suppress(RemoteError):  # the refused one
            await tools.call(tool, input, run_id=run_id, step=step, call_id=f"c{step}", **kw)
    events = await _tool_events(tools.bus, run_id, 2 * len(calls))
    assert [(e.step, e.event) for _, e in events] == [
        (step, kind) for step in range(len(calls)) for kind in ("started", "finished")
    ]
    for i, (headers, event) in enumerate(events):
        step = i // 2
        assert headers[s.HEADER_MSG_ID] == f"{run_id}:c{step}:{event.event}"
        assert (event.run_id, event.task_id, event.call_id) == (run_id, "task-1", f"c{step}")
        assert event.tool == calls[step][0] and event.input == calls[step][1]
    finished = [e for _, e in events if e.event == "finished"]
    assert [e.ok for e in finished] == [True, True, False, False, True]
    assert finished[0].output == {"url": site + "/", "status": 200, "title": "Shop"}
    assert finished[0].metadata is not None and finished[0].metadata.http_status == 200
    assert finished[1].output == ["Widget", "Gadget", "Doohickey"]
    assert finished[2].error is not None and finished[2].error.code == "element_not_found"
    assert finished[3].error is not None and finished[3].error.code == "tool_not_allowed"
    assert all(e.duration_ms is not None for e in finished)
    started = [e for _, e in events if e.event == "started"]
    assert all(e.ok is None and e.output is None for e in started)
    assert all(a.at <= b.at for a, b in zip(started, finished, strict=True))


async def test_a_retried_step_is_not_deduplicated(tools: Tools, site: str) -> None:
    run_id = "run-retry"
    for call_id in ("a1-b0", "a2-b0"):
        await tools.call(
            "browser_navigate", {"url": site + "/"}, run_id=run_id, step=0, call_id=call_id
        )
    # Without a call_id one is generated per call, so these are distinct too.
    await tools.call("browser_read_page", run_id=run_id, step=1)
    await tools.call("browser_read_page", run_id=run_id, step=1)
    events = await _tool_events(tools.bus, run_id, 8)
    ids = [h[s.HEADER_MSG_ID] for h, _ in events]
    assert len(set(ids)) == 8
    assert ids[:4] == [
        f"{run_id}:a1-b0:started",
        f"{run_id}:a1-b0:finished",
        f"{run_id}:a2-b0:started",
        f"{run_id}:a2-b0:finished",
    ]


async def test_a_call_sent_again_under_its_call_id_runs_once(tools: Tools) -> None:
    # The same request again (a `nats req` re-sent when its reply was lost): it gets the
    # first one's result and does not act a second time (here: write over a file that
    # changed since), which its de-duplicated events could not show anyway.
    run_id = "run-resent"
    write = {"path": "once.txt", "content": "first"}
    first = await tools.call("file_write", write, run_id=run_id, call_id="a1-b0")
    assert first.ok
    (tools.root / "once.txt").write_text("changed since")
    again = await tools.call("file_write", write, run_id=run_id, call_id="a1-b0")
    assert again == first
    assert (tools.root / "once.txt").read_text() == "changed since"
    assert len(await _tool_events(tools.bus, run_id, 2)) == 2
    # Another call under a call_id already used is refused, not answered with the first.
    other = {"path": "once.txt", "content": "other"}
    err = await tools.refused("file_write", other, run_id=run_id, call_id="a1-b0")
    assert (err.code, err.info.field) == ("invalid_request", "call_id")
    assert (tools.root / "once.txt").read_text() == "changed since"
    # A refusal is not kept: nothing ran, and asked again the call is decided afresh.
    await tools.refused("file_write", write, run_id=run_id, call_id="a1-b1", allowed=[])
    allowed = await tools.call("file_write", write, run_id=run_id, call_id="a1-b1")
    assert allowed.ok and (tools.root / "once.txt").read_text() == "first"


async def test_a_call_whose_events_cannot_be_recorded(
    tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_publish = tools_service.ToolEvents.publish
    failing: set[str] = set()

    async def publish(self: Any, call: ExecTool, call_id: str, event: ToolEvent) -> None:
        if event.event in failing:
            raise ConnectionError("JetStream is unreachable")
        await real_publish(self, call, call_id, event)

    monkeypatch.setattr(tools_service.ToolEvents, "publish", publish)
    written = tools.root / "written.txt"
    write = {"path": "written.txt", "content": "x"}
    # Its start cannot be recorded: the call does not run (its trace would lie).
    failing.add("started")
    err = await tools.refused("file_write", write, run_id="run-nojs")
    assert (err.code, err.status) == ("unavailable", 503)
    assert "JetStream is unreachable" in err.message
    assert not written.exists()
    # Its end cannot be recorded: the tool ran, and its result still comes back.
    failing.clear()
    failing.add("finished")
    result = await tools.call("file_write", write, run_id="run-nojs")
    assert result.ok and result.output == {"path": str(written), "bytes": 1}
    assert written.read_text() == "x"
    failing.clear()
    [(_, started)] = await _tool_events(tools.bus, "run-nojs", 1)
    assert started.event == "started" and started.tool == "file_write"
    assert (await tools.call("shell_exec", {"command": "echo still here"})).ok


async def test_a_huge_page_title_is_cut_in_reply_and_event(tools: Tools, site: str) -> None:
    nav = await tools.call("browser_navigate", {"url": site + "/bigtitle"}, run_id="run-title")
    assert nav.ok and nav.metadata.http_status == 200
    title = nav.metadata.title
    assert title is not None and len(title) <= 1024
    assert title.startswith("TTTT") and title.endswith("\u2026")
    events = await _tool_events(tools.bus, "run-title", 2)
    finished = events[1][1]
    assert finished.event == "finished" and finished.ok
    assert finished.metadata is not None and finished.metadata.title == title
    await _still_serving(tools, site)


async def test_an_error_quotes_only_the_start_of_a_long_url(tools: Tools) -> None:
    url = f"http://127.0.0.1:{free_port()}/" + "a" * 200_000  # nothing listens there
    nav = await tools.call("browser_navigate", {"url": url}, run_id="run-long-url")
    assert nav.error is not None and nav.error.code == "navigation_failed"
    assert nav.error.message.startswith(f"cannot open {url[:100]}")
    assert len(nav.error.message) < 1000


async def test_large_outputs_are_bounded_in_reply_and_event(tools: Tools) -> None:
    big = "z" * 2_000_000
    (tools.root / "big.txt").write_text(big)
    read = await tools.call("file_read", {"path": "big.txt"}, run_id="run-big", call_id="big")
    assert read.ok and read.truncated
    assert 100_000 < len(read.output) < 300_000
    events = await _tool_events(tools.bus, "run-big", 2)
    assert events[1][1].truncated and len(events[1][1].output) == len(read.output)


async def test_a_call_that_cannot_run_says_why_in_reply_and_event(
    bus: Bus, settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "noshebang").write_text("echo hi\n")
    (root / "noshebang").chmod(0o755)
    settings = settings.with_(allowed_commands=("./**",), path_roots=(str(root),))
    run_id = "run-cannot"
    async with running(bus, settings, root) as tools:
        err = await tools.refused("file_read", {"path": "~no_such_user_rote/x"}, run_id=run_id)
        assert (err.code, err.info.field) == ("path_denied", "input.path")
        for command in ("./noshebang", "./noshebang/x"):
            result = await tools.call("shell_exec", {"command": command}, run_id=run_id)
            assert not result.ok and result.error is not None, command
            assert result.error.code == "command_failed", result.error
        finished = [e for _, e in await _tool_events(bus, run_id, 6) if e.event == "finished"]
    assert [e.error.code for e in finished if e.error] == [
        "path_denied",
        "command_failed",
        "command_failed",
    ]


async def test_a_started_service_kills_what_a_killed_one_left_running(
    bus: Bus, settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    # The tools process running a command was SIGKILLed: the command runs on.
    with orphaned_call(tmp_path) as orphan:
        async with running(bus, settings, root):
            with anyio.fail_after(10):
                while alive(orphan):
                    await anyio.sleep(0.05)


async def test_an_unexpected_failure_is_internal_in_reply_and_event(
    tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in a tool")

    monkeypatch.setattr(local, "file_read", broken)
    (tools.root / "a.txt").write_text("a")
    err = await tools.refused("file_read", {"path": "a.txt"}, run_id="run-bug")
    assert (err.code, err.status) == ("internal", 500)
    assert "ZeroDivisionError" in err.message and "ref " in err.message
    _, (_, finished) = await _tool_events(tools.bus, "run-bug", 2)
    # Not "cancelled": the event tells what the caller was told.
    assert finished.ok is False and finished.error is not None
    assert (finished.error.code, finished.error.message) == ("internal", err.message)
    # The service goes on.
    assert (await tools.call("shell_exec", {"command": "echo still here"})).ok


async def test_long_keys_in_an_input_are_bounded_in_the_events(tools: Tools) -> None:
    fields = {"K" * 300_000: ".name", "L" * 300_000: ".price"}
    await tools.call("browser_extract", {"selector": "li", "fields": fields}, run_id="run-keys")
    events = await _tool_events(tools.bus, "run-keys", 2)
    for _, event in events:
        assert len(msgspec.json.encode(event.input)) <= 64 * 1024
        assert event.input["selector"] == "li" and len(event.input["fields"]) == 2


async def test_an_input_cut_to_fit_its_events_says_so(tools: Tools) -> None:
    # The file is written whole; its events carry a cut copy of the input, flagged so a
    # trace never takes it for the call as made (replayed, it would write a cut file).
    content = "".join(f"line {i}: some report text\n" for i in range(4000))  # ~110 KB
    written = await tools.call(
        "file_write", {"path": "report.txt", "content": content}, run_id="run-cut-input"
    )
    assert written.ok and (tools.root / "report.txt").read_text() == content
    await tools.call("file_write", {"path": "small.txt", "content": "x"}, run_id="run-cut-input")
    events = await _tool_events(tools.bus, "run-cut-input", 4)
    assert [(e.event, e.input_truncated) for _, e in events] == [
        ("started", True), ("finished", True), ("started", False), ("finished", False),
    ]  # fmt: skip
    assert len(events[0][1].input["content"]) < len(content)
    assert events[2][1].input == {"path": "small.txt", "content": "x"}


async def test_tool_errors_are_masked_in_reply_and_event(tools: Tools, site: str) -> None:
    # Tool errors quote what the call was given: a URL with its password, a path with
    # a registered secret in it.
    secret = "rote-tools-events-secret-5521"
    register_secret(secret)
    port = free_port()  # nothing listens there
    unreachable = f"http://scraper:hunter2pw@127.0.0.1:{port}/private"
    opened = f"{site.replace('http://', 'http://scraper:hunter2pw@')}/"
    nav = await tools.call("browser_navigate", {"url": unreachable}, run_id="run-mask", timeout_s=5)
    read = await tools.call("file_read", {"path": f"{secret}.txt"}, run_id="run-mask")
    ok = await tools.call("browser_navigate", {"url": opened}, run_id="run-mask")
    assert nav.error is not None and nav.error.code == "navigation_failed"
    assert f"cannot open http://scraper:{MASK}@127.0.0.1:{port}/private" in nav.error.message
    assert read.error is not None and read.error.code == "not_found"
    assert f"{MASK}.txt" in read.error.message
    assert ok.ok
    events = await _tool_events(tools.bus, "run-mask", 6)
    stored = b"".join(msgspec.json.encode(event) for _, event in events)
    assert b"hunter2pw" not in stored and secret.encode() not in stored
    for error in (nav.error.message, read.error.message):
        assert "hunter2pw" not in error and secret not in error
    finished = [event for _, event in events if event.event == "finished"]
    assert [e.error for e in finished[:2]] == [nav.error, read.error]
    # The page opened keeps its password in its URL: masked in the event's metadata and
    # in the reply, which the runner keeps in the run's transcript and shows the model.
    assert finished[2].metadata is not None
    assert finished[2].metadata.url == opened.replace("hunter2pw", MASK)
    assert ok.metadata.url == opened.replace("hunter2pw", MASK)
    assert ok.output["url"] == opened.replace("hunter2pw", MASK)


async def test_token_links_reach_the_model_and_are_masked_in_events(
    tools: Tools, site: str
) -> None:
    # The model must be able to follow a page's links (a password reset, a presigned
    # download): replies keep credential query parameters; the events, kept in the
    # trace, mask them.
    run_id = "run-query"
    url = f"{site}/?access_token=QTok-5521&page_token=p2"
    nav = await tools.call("browser_navigate", {"url": url}, run_id=run_id)
    assert nav.ok and nav.output["url"] == url and nav.metadata.url == url
    await tools.call("browser_navigate", {"url": f"{site}/mail"}, run_id=run_id)
    link = await tools.call(
        "browser_extract", {"selector": "#reset", "attribute": "href"}, run_id=run_id
    )
    (href,) = link.output
    assert f"token={RESET_TOKEN}" in href
    reset = await tools.call("browser_navigate", {"url": urljoin(site, href)}, run_id=run_id)
    assert reset.ok and RESET_TOKEN in reset.output["url"]
    state = await tools.call("browser_extract", {"selector": "#state"}, run_id=run_id)
    assert state.output == ["valid"]  # the link worked

    events = await _tool_events(tools.bus, run_id, 10)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert b"QTok-5521" not in stored and RESET_TOKEN.encode() not in stored
    shown = f"{site}/?access_token={MASK}&page_token=p2"  # a pagination cursor is no secret
    assert [e.input["url"] for _, e in events[:2]] == [shown, shown]
    finished = [e for _, e in events if e.event == "finished"]
    assert finished[0].output["url"] == shown and finished[0].metadata.url == shown
    assert finished[2].output == [href.replace(RESET_TOKEN, MASK)]


async def test_text_typed_into_password_fields_is_masked_in_events(tools: Tools, site: str) -> None:
    run_id = "run-login"
    await tools.call("browser_navigate", {"url": site + "/login"}, run_id=run_id)
    password = {"selector": "#field2", "text": "Typed-Pw-1"}  # type=password, a dull id
    user = {"selector": "#user", "text": "ada"}
    missing = {"selector": "#nope", "text": "Typed-Pw-3"}  # never reached a field
    form = {"fields": {"user": "ada", "pin": "PIN-2468", "#field2": "Typed-Pw-2"}}
    typed = await tools.call("browser_type", password, run_id=run_id)
    plain = await tools.call("browser_type", user, run_id=run_id)
    failed = await tools.call("browser_type", missing, run_id=run_id, timeout_s=3)
    filled = await tools.call("browser_fill_form", form, run_id=run_id)
    # The tool says which fields were password fields (it saw their type).
    assert typed.ok and typed.output["password_fields"] == ["#field2"]
    assert plain.ok and "password_fields" not in plain.output
    assert not failed.ok
    assert filled.ok and filled.output["title"] == "Thanks"
    assert filled.output["password_fields"] == ["#field2"]

    events = await _tool_events(tools.bus, run_id, 10)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert b"Typed-Pw-" not in stored and b"PIN-2468" not in stored
    started = [e.input for _, e in events if e.event == "started"]
    finished = [e.input for _, e in events if e.event == "finished"]
    # Sent before the page is looked at: a started event carries no typed text.
    assert started[1:] == [
        {**password, "text": MASK},
        {**user, "text": MASK},
        {**missing, "text": MASK},
        {"fields": {"user": MASK, "pin": MASK, "#field2": MASK}},
    ]
    # The finished event (what a trace is built from) shows what is no secret.
    assert finished[1:] == [
        {**password, "text": MASK},
        user,
        {**missing, "text": MASK},  # failed: which field it reached is unknown
        {"fields": {"user": "ada", "pin": MASK, "#field2": MASK}},  # pin: by its name
    ]


async def test_secrets_of_the_environment_are_masked_in_replies_and_events(
    bus: Bus, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Values whose names say secret, in the tools process's environment: a file (an
    # env file, /proc/<pid>/environ) can show them to a command or to file_read.
    secrets = {
        "AWS_SECRET_ACCESS_KEY": "AwsAuditSecretKey0123456789",
        "STRIPE_KEY": "StripeAuditKey_998877",
        "db_password": "lowercaseAuditPw88",
        "SHORT_PASSWORD": "pw12345",
        "MYSQL_PWD": "MysqlAuditPwd777",
        "GITHUB_PAT": "ghp_AuditGithubPat0000",
        "DATABASE_URL": "postgresql://:EmptyUserAuditPw@db/x",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    root = tmp_path / "files"
    root.mkdir()
    (root / "deploy.env").write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    settings = settings.with_(allowed_commands=("cat **",), path_roots=(str(root),))
    async with running(bus, settings, root) as tools:
        read = await tools.call("file_read", {"path": "deploy.env"}, run_id="run-env")
        cat = await tools.call("shell_exec", {"command": "cat deploy.env"}, run_id="run-env")
        events = await _tool_events(bus, "run-env", 4)
    expected = "".join(f"{name}={MASK}\n" for name in secrets)
    assert (read.output, cat.output["stdout"]) == (expected, expected)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    for value in secrets.values():
        assert value.encode() not in stored


async def test_secrets_written_escaped_in_json_or_xml_are_masked(
    bus: Bus, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A config file holds a password as its format escapes it: XML (`&amp;`), JSON as
    # PHP writes it (`\/`) or as Go writes it (`\u0026`), where the raw value is absent.
    password = "Xml&Audit/Pw<9>"
    monkeypatch.setenv("DB_PASSWORD", password)
    files = {
        "app.xml": "<password>Xml&amp;Audit/Pw&lt;9&gt;</password>\n",
        "php.json": '{"password":"Xml&Audit\\/Pw<9>"}\n',
        "go.json": '{"password":"Xml\\u0026Audit/Pw\\u003c9\\u003e"}\n',
    }
    root = tmp_path / "files"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    settings = settings.with_(allowed_commands=("cat **",), path_roots=(str(root),))
    async with running(bus, settings, root) as tools:
        read = [
            (await tools.call("file_read", {"path": name}, run_id="run-escaped")).output
            for name in files
        ]
        cat = await tools.call("shell_exec", {"command": "cat go.json"}, run_id="run-escaped")
        events = await _tool_events(bus, "run-escaped", 8)
    assert read == [
        f"<password>{MASK}</password>\n",
        f'{{"password":"{MASK}"}}\n',
        f'{{"password":"{MASK}"}}\n',
    ]
    assert cat.output["stdout"] == f'{{"password":"{MASK}"}}\n'
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert b"Audit" not in stored  # no form of the password, escaped or not


# --- the browser dying ---------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _leftovers() -> list[int]:
    """Our Playwright drivers and Chromium processes still running (zombies aside)."""
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state != "Z" and (b"run-driver" in raw or b"chrom" in raw.split(b"\0", 1)[0]):
            pids.append(pid)
    return pids


@pytest.fixture
def nothing_left_behind() -> Iterator[None]:
    """After a test (and its service's shutdown): no driver or Chromium of ours runs."""
    yield
    deadline = time.monotonic() + 10
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _leftovers()
    assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left]


def _browser_pids() -> list[int]:
    """Our Chromium's main process(es): descendants of this test process running Chromium
    without a --type= (renderers, GPU and zygotes have one; they rewrite their command
    line into one space-separated string, so look at all of it)."""
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        exe = raw.split(b"\0", 1)[0]
        if (b"chrom" in exe or b"headless_shell" in exe) and b"--type=" not in raw:
            pids.append(pid)
    return pids


async def test_browser_relaunches_after_it_is_killed(tools: Tools, site: str, gate: Gate) -> None:
    await tools.call("browser_navigate", {"url": f"{site}/setcookie?who=dora"}, run_id="run-d")
    pids = _browser_pids()
    assert len(pids) == 1, pids

    # A call in flight when the browser dies fails; only that call.
    async def in_flight() -> ToolResult:
        return await tools.call("browser_navigate", {"url": gate.url(site)}, run_id="run-d")

    results: list[ToolResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(results, in_flight()))
        await gate.wait_asked()  # the page is loading: the call is in flight
        os.kill(pids[0], signal.SIGKILL)
    gate.opened.set()
    assert len(results) == 1
    assert not results[0].ok and results[0].error is not None
    assert results[0].error.code in ("browser_closed", "navigation_failed", "browser_error")

    # The next call succeeds on a relaunched browser, in a fresh context.
    nav = await tools.call("browser_navigate", {"url": site + "/cookies"}, run_id="run-d")
    assert nav.ok, nav.error
    cookie = await tools.call("browser_extract", {"selector": "#cookie"}, run_id="run-d")
    assert cookie.output == ["none"]
    other = await tools.call("browser_navigate", {"url": site + "/"}, run_id="run-e")
    assert other.ok
    new_pids = _browser_pids()
    assert len(new_pids) == 1 and new_pids != pids


def _driver_pids() -> list[int]:
    """Our Playwright drivers: the node processes running `run-driver` (zombies aside)."""
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state != "Z" and b"run-driver" in raw:
            pids.append(pid)
    return pids


async def test_browser_recovers_after_the_playwright_driver_is_killed(
    tools: Tools, site: str, gate: Gate
) -> None:
    """The driver's death closes no browser Playwright knows of (no `disconnected`, and
    the browser still says it is connected): every later call would fail for good."""
    await tools.call("browser_navigate", {"url": f"{site}/setcookie?who=dora"}, run_id="run-d")
    idle = await tools.call("browser_navigate", {"url": f"{site}/page2"}, run_id="run-idle")
    assert idle.ok, idle.error
    drivers, browsers = _driver_pids(), _browser_pids()
    assert len(drivers) == 1 and len(browsers) == 1, (drivers, browsers)

    async def in_flight() -> ToolResult:
        return await tools.call("browser_navigate", {"url": gate.url(site)}, run_id="run-d")

    results: list[ToolResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(results, in_flight()))
        await gate.wait_asked()
        os.kill(drivers[0], signal.SIGKILL)
    gate.opened.set()
    assert len(results) == 1
    assert not results[0].ok and results[0].error is not None
    assert results[0].error.code in ("browser_closed", "navigation_failed", "browser_error")

    # The next call works, soon, on a new driver and Chromium, in a fresh context.
    with anyio.fail_after(10):
        nav = await tools.call("browser_navigate", {"url": site + "/cookies"}, run_id="run-d")
    assert nav.ok, nav.error
    cookie = await tools.call("browser_extract", {"selector": "#cookie"}, run_id="run-d")
    assert cookie.output == ["none"]
    # A run whose page died with the driver is told so, as when Chromium dies.
    lost = await tools.call("browser_extract", {"selector": "h1"}, run_id="run-idle")
    assert not lost.ok and lost.error is not None and lost.error.code == "session_lost"
    again = await tools.call("browser_navigate", {"url": site + "/page2"}, run_id="run-idle")
    assert again.ok, again.error
    new_drivers, new_browsers = _driver_pids(), _browser_pids()
    assert len(new_drivers) == 1 and new_drivers != drivers
    assert len(new_browsers) == 1 and new_browsers != browsers


async def _append(results: list[ToolResult], call: Any) -> None:
    results.append(await call)
