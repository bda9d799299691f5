"""A task that signs in with a secret named by placeholder compiles and replays like any
other form, and the secret stays in the tools service: not in the answer, the
transcript, the trace, the executor or any event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contracts import subjects as s
from contracts.executors import ActiveExecutor, ExecutorRef
from contracts.runs import RunRef, Transcript
from contracts.tasks import TaskSpec
from services.kernel.codec import encode
from services.kernel.replay_read import read_all
from services.kernel.settings import Settings
from tests.e2e.conftest import Rig
from tests.e2e.test_replay_lifecycle import run, wait_compiled
from tests.local_site import QuietHandler, serve

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

PASSWORD = "Login-Replay-Pw-5521"
LOGIN = """<title>Sign in</title><form method="post" action="/session">
<label>user <input name="user"></label>
<label>password <input name="password" type="password"></label><button>Sign in</button></form>"""
SIGN_INS: list[bool] = []


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        self.send_html(LOGIN)

    def do_POST(self) -> None:
        form = self.posted_form()
        SIGN_INS.append(form.get("password") == PASSWORD)
        if SIGN_INS[-1]:
            self.send_html(f"<title>Account</title><p>Sign-in successful, {form['user']}</p>")
        else:
            self.send_html("<title>Sign in</title><p>Wrong password</p>", status=403)


@pytest.fixture
def login_site() -> Iterator[str]:
    SIGN_INS.clear()
    with serve(_Handler) as url:
        yield url


@pytest.fixture
def stack_settings(
    stack_settings: Settings, login_site: str, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    monkeypatch.setenv("ROTE_SECRET_SHOP", PASSWORD)
    secrets = Settings.from_env({"ROTE_TOOLS_SECRETS": f"shop={login_site}"}).tools_secrets
    return stack_settings.with_(tools_secrets=secrets)


async def test_a_login_by_placeholder_compiles_and_replays(rig: Rig, login_site: str) -> None:
    bus = rig.stack.bus
    spec = TaskSpec(
        name="news",
        prompt=f"Open {login_site}/login, fill the form with user=ada, "
        "password={{secret:shop}} and report the confirmation",
    )
    first = await run(rig, spec)
    assert first.status == "completed" and first.source == "full_llm", first.error
    assert first.result == "Confirmation: Sign-in successful, ada"
    await wait_compiled(bus, "news", 1)  # a typed password, masked, would never compile

    second = await run(rig, spec)
    assert second.status == "completed", second.error
    assert second.source == "executor" and second.result == first.result
    assert SIGN_INS == [True, True]  # the replay signed in with the real password too

    active = await bus.request(s.EXECUTORS_ACTIVE, ExecutorRef(task_id="news"), ActiveExecutor)
    assert active.executor is not None
    kept = [encode(active.executor)]
    for run_id in (first.run_id, second.run_id):
        transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
        kept.append(encode(transcript))
    for stream in (s.STREAM_RUNS, s.STREAM_ACTIVITY, s.STREAM_TRACES, s.STREAM_EXECUTORS):
        kept.extend(m.data for m in await read_all(bus.js, stream, ">"))
    everything = b"\n".join(kept)
    assert b"{{secret:shop}}" in everything  # the placeholder is what is kept
    assert PASSWORD.encode() not in everything
