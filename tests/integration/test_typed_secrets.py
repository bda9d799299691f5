"""A secret typed by placeholder (`{{secret:shop}}`): the page gets the value, while the
reply, the events (and so a trace) hold only the placeholder; on a page of another
origin, or unconfigured, it is refused and nothing is typed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from services.kernel.bus import Bus
from services.kernel.secrets import MASK
from services.kernel.settings import Settings
from tests.integration.test_tools_service import Tools, _tool_events, running
from tests.local_site import QuietHandler, serve

pytestmark = [pytest.mark.anyio, pytest.mark.browser]

PASSWORD = "Shop-Login-Pw-4417"
# A browser encodes a form sent by GET unlike Python's quote_plus (`~` as %7E, `*` kept).
GET_PASSWORD = "Get~Pw*4417 x"
# An API token with characters JSON encoders escape (PHP `\/`, Go `\u0026`).
API_TOKEN = "Api/Tok&en+4417"
LOGIN = """<title>Sign in</title><form method="post" action="/session">
<input name="user"><input name="password" type="password"><button>Sign in</button></form>"""
POSTED: list[dict[str, str]] = []


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        # /framed/HOST: the sign-in form in a frame served as HOST (another origin when
        # HOST is not the one the page itself was asked for).
        if self.path.startswith("/framed/"):
            host = self.path.removeprefix("/framed/")
            port = self.server.server_address[1]
            self.send_html(f'<title>Shop</title><iframe src="http://{host}:{port}/login"></iframe>')
            return
        if self.path == "/api-login":
            self.send_html(LOGIN.replace('action="/session"', 'action="/api-session"'))
            return
        if self.path == "/get-login":  # a form sent by GET: the password ends up in the URL
            self.send_html(LOGIN.replace('method="post" action="/session"', 'action="/account"'))
            return
        if self.path.startswith("/account?"):
            self.send_html("<title>Account</title><p>Welcome</p>")
            return
        self.send_html(LOGIN)

    def do_POST(self) -> None:
        form = self.posted_form()
        POSTED.append(form)
        if self.path == "/api-session":  # the token shown back as JSON, as PHP and Go write it
            token = form.get("password", "")
            body = json.dumps({"php": token}).replace("/", "\\/")
            self.send_html(body + json.dumps({"go": token}).replace("&", "\\u0026"))
            return
        # A careless site that shows the password back.
        said = f"<p>Signed in with {form.get('password')}</p>"
        if form.get("password") == PASSWORD:
            self.send_html(f"<title>Account</title><p>Welcome {form.get('user')}</p>{said}")
        else:
            self.send_html(f"<title>Sign in</title><p>Wrong password</p>{said}")


@pytest.fixture
def shop() -> Iterator[str]:
    POSTED.clear()
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def tools(
    bus: Bus, settings: Settings, tmp_path: Path, shop: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Tools]:
    monkeypatch.setenv("ROTE_SECRET_SHOP", PASSWORD)
    monkeypatch.setenv("ROTE_SECRET_UNSET", "")
    monkeypatch.setenv("ROTE_SECRET_BYGET", GET_PASSWORD)
    monkeypatch.setenv("ROTE_SECRET_API", API_TOKEN)
    env = {"ROTE_TOOLS_SECRETS": f"shop={shop},unset={shop},byget={shop},api={shop}"}
    settings = settings.with_(tools_secrets=Settings.from_env(env).tools_secrets)
    async with running(bus, settings, tmp_path) as service:
        yield service


async def test_a_placeholder_types_the_secret_and_only_the_placeholder_is_kept(
    tools: Tools, shop: str
) -> None:
    run_id = "run-login"
    await tools.call("browser_navigate", {"url": f"{shop}/login"}, run_id=run_id)
    form = {"fields": {"user": "ada", "password": "{{secret:shop}}"}}
    signed_in = await tools.call("browser_fill_form", form, run_id=run_id)
    assert signed_in.ok, signed_in.error
    assert signed_in.output["title"] == "Account"  # the server got the real password

    await tools.call("browser_navigate", {"url": f"{shop}/login"}, run_id=run_id)
    typed = {"selector": "input[name=password]", "text": "{{ secret:SHOP }}", "submit": True}
    assert (await tools.call("browser_type", typed, run_id=run_id)).output["title"] == "Account"

    events = await _tool_events(tools.bus, run_id, 8)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert PASSWORD.encode() not in stored
    finished = [e.input for _, e in events if e.event == "finished"]
    # Kept as written, even in a password field: a trace of it compiles and replays.
    assert finished[1] == form and finished[3] == typed


async def test_a_page_showing_the_secret_back_shows_it_masked(tools: Tools, shop: str) -> None:
    await tools.call("browser_navigate", {"url": f"{shop}/login"}, run_id="run-echo")
    form = {"fields": {"user": "ada", "password": "{{secret:shop}}"}}
    assert (await tools.call("browser_fill_form", form, run_id="run-echo")).ok
    page = await tools.call("browser_read_page", run_id="run-echo")
    assert f"Signed in with {MASK}" in page.output and PASSWORD not in page.output


async def test_a_page_showing_the_secret_back_json_escaped_shows_it_masked(
    tools: Tools, shop: str
) -> None:
    run_id = "run-json"
    await tools.call("browser_navigate", {"url": f"{shop}/api-login"}, run_id=run_id)
    form = {"fields": {"user": "ada", "password": "{{secret:api}}"}}
    assert (await tools.call("browser_fill_form", form, run_id=run_id)).ok
    assert POSTED[-1]["password"] == API_TOKEN
    page = await tools.call("browser_read_page", run_id=run_id)
    assert page.output == f'{{"php": "{MASK}"}}{{"go": "{MASK}"}}'

    events = await _tool_events(tools.bus, run_id, 6)
    assert b"Tok" not in b"".join(msgspec.json.encode(e) for _, e in events)


async def test_a_secret_a_get_form_puts_in_the_url_is_masked_there(tools: Tools, shop: str) -> None:
    run_id = "run-get"
    await tools.call("browser_navigate", {"url": f"{shop}/get-login"}, run_id=run_id)
    form = {"fields": {"user": "ada", "password": "{{secret:byget}}"}}
    signed_in = await tools.call("browser_fill_form", form, run_id=run_id)
    assert signed_in.ok, signed_in.error
    masked = f"{shop}/account?user=ada&password={MASK}"
    assert signed_in.output["url"] == masked and signed_in.metadata.url == masked

    events = await _tool_events(tools.bus, run_id, 4)
    stored = b"".join(msgspec.json.encode(e) for _, e in events)
    assert b"Get%7EPw*4417+x" not in stored and b"[redacted]" in stored


async def test_a_placeholder_within_other_text_is_typed_as_written(tools: Tools, shop: str) -> None:
    await tools.call("browser_navigate", {"url": f"{shop}/login"}, run_id="run-part")
    form = {"fields": {"user": "ada", "password": "pw{{secret:shop}}"}}
    assert (await tools.call("browser_fill_form", form, run_id="run-part")).ok
    assert POSTED[-1]["password"] == "pw{{secret:shop}}"


async def test_a_secret_is_refused_off_its_origin_unconfigured_or_unset(
    tools: Tools, shop: str
) -> None:
    elsewhere = shop.replace("127.0.0.1", "localhost")  # another origin, same server
    cases = [
        (elsewhere, "shop", "secret_refused", f"typed only on {shop}; this page is"),
        (shop, "bank", "secret_unknown", "no secret named 'bank' is configured"),
        (shop, "unset", "secret_unknown", "ROTE_SECRET_UNSET is not set"),
    ]
    for site, name, code, said in cases:
        await tools.call("browser_navigate", {"url": f"{site}/login"}, run_id="run-off")
        form = {"fields": {"user": "ada", "password": f"{{{{secret:{name}}}}}"}}
        refused = await tools.call("browser_fill_form", form, run_id="run-off")
        assert not refused.ok and refused.error is not None
        assert refused.error.code == code and said in refused.error.message
    assert POSTED == []  # nothing was submitted
    # Nor typed, not even the user: the form sent by hand now is empty (blank fields
    # are left out).
    assert (await tools.call("browser_click", {"text": "Sign in"}, run_id="run-off")).ok
    assert POSTED == [{}]


IN_FRAME = "iframe >> internal:control=enter-frame >> "


async def test_a_secret_goes_into_a_frame_only_of_its_origin(tools: Tools, shop: str) -> None:
    # The page is the shop's, its frame another origin's (an embedded widget, an ad):
    # a selector reaching into that frame does not get the secret.
    run_id = "run-frames"
    other = shop.replace("127.0.0.1", "localhost")
    await tools.call("browser_navigate", {"url": f"{shop}/framed/localhost"}, run_id=run_id)
    field = f"{IN_FRAME}input[name=password]"
    attempts = [
        ("browser_type", {"selector": field, "text": "{{secret:shop}}", "submit": True}),
        (
            "browser_fill_form",
            {"fields": {f"{IN_FRAME}[name=user]": "ada", field: "{{secret:shop}}"}},
        ),
    ]
    for tool, args in attempts:
        refused = await tools.call(tool, args, run_id=run_id)
        assert not refused.ok and refused.error is not None, tool
        assert refused.error.code == "secret_refused", (tool, refused.error)
        assert f"the field {field!r} is in a frame of {other}" in refused.error.message
    # Nothing reached the frame's form, not even the user: sent by hand, it is empty.
    clicked = await tools.call("browser_click", {"selector": f"{IN_FRAME}button"}, run_id=run_id)
    assert clicked.ok, clicked.error
    assert POSTED == [{}]  # the call returns once the frame's form has reached the server

    # A frame of the shop's own origin gets it.
    await tools.call("browser_navigate", {"url": f"{shop}/framed/127.0.0.1"}, run_id=run_id)
    typed = {"selector": field, "text": "{{secret:shop}}", "submit": True}
    signed_in = await tools.call("browser_type", typed, run_id=run_id)
    assert signed_in.ok, signed_in.error
    assert POSTED[-1] == {"password": PASSWORD}
