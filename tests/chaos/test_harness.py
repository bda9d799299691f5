"""The chaos suite's own instruments, checked: the site counts every submit and holds a
request until it is let go, the judge calls a second submit (or a second ending, a lost
run, a guess) a failure, the effect journal is read as the runner writes it, and the
suite as planned injects at least 30 faults."""

from __future__ import annotations

import threading
import urllib.request
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.effects import Effect
from contracts.runs import RunEvent
from contracts.tasks import TaskSpec, TaskView
from services.kernel.bus import Bus
from services.kernel.codec import encode
from tests.chaos import test_cluster_leaders, test_nats_outages, test_runner_kills
from tests.chaos.ledger import Case, journal_of, judge
from tests.chaos.site import CountingSite

pytestmark = [pytest.mark.anyio, pytest.mark.chaos]


def test_the_suite_injects_at_least_30_faults() -> None:
    planned = (
        test_runner_kills.PLANNED_FAULTS
        + test_nats_outages.PLANNED_FAULTS
        + test_cluster_leaders.PLANNED_FAULTS
    )
    assert planned >= 30


def _post(url: str, fields: dict[str, str]) -> str:
    data = urlencode(fields).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as reply:
        return str(reply.read().decode())


async def test_the_site_counts_each_submit_and_holds_one_until_let_go() -> None:
    with CountingSite() as site:
        hold = site.hold("POST", "k1")
        answers: list[str] = []
        first = threading.Thread(
            target=lambda: answers.append(_post(f"{site.url}/f/k1/submit", {"name": "ada"}))
        )
        first.start()
        assert await hold.wait_arrived(10)
        # Counted as it arrived, while still unanswered: the effect happened.
        assert [p.fields for p in site.posts_of("k1")] == [{"name": "ada"}]
        assert answers == []
        hold.release()
        first.join(10)
        assert "Thank you, ada! Your form was received." in answers[0]
        # Only one request is held; the next passes, and other keys are apart.
        _post(f"{site.url}/f/k1/submit", {"name": "ada"})
        _post(f"{site.url}/f/k2/submit", {"name": "bob"})
        assert len(site.posts_of("k1")) == 2 and len(site.posts_of("k2")) == 1


def _ending(event: str, attempt: int, reason: str | None = None) -> RunEvent:
    status = "completed" if event == "completed" else "failed"
    return RunEvent(
        task_id="t", run_id="r", event=event, at=utc_now(), status=status,  # type: ignore[arg-type]
        reason=reason, attempt=attempt,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_judge_names_every_target_a_run_misses() -> None:
    case = Case(name="c", task_id="t", key="k", run_id="r")
    done = _ending("completed", 1)
    assert judge(case, done, [done], 1, 1, None).problems == []
    assert judge(case, done, [done], 2, 2, None).problems == [
        "form submitted 2 times",
        "completed with 2 submits",
    ]
    again = _ending("completed", 2)
    assert judge(case, done, [done, again], 1, 2, None).problems == [
        "ended 2 times (completed@1,completed@2)"
    ]
    assert judge(case, None, [], 0, 1, None).problems == [
        "run lost: no terminal event in ROTE_RUNS"
    ]
    guessed = _ending("failed", 2, "tool_error")
    assert judge(case, guessed, [guessed], 1, 2, None).problems == [
        "failed tool_error after its submit reached the site: not needs_attention"
    ]
    assert judge(case, guessed, [guessed], 0, 2, None).problems == []  # it never acted
    done.result = "I could not fill the form on http://x/f/k: timeout"
    assert judge(case, done, [done], 1, 1, None).problems == [
        "completed saying its submit failed, though the site got it"
    ]
    told = _ending("failed", 2, "needs_attention")
    assert judge(case, told, [told], 1, 2, None).problems == []
    assert judge(case, told, [told], 1, 2, _task("active")).problems == [
        "needs_attention but its task is active"
    ]


def _task(status: str) -> TaskView:
    now = utc_now()
    return TaskView(
        task_id="t", spec=TaskSpec(name="t", prompt="p"), status=status,  # type: ignore[arg-type]
        version=1, created_at=now, updated_at=now,
    )  # fmt: skip


def _effect(key: str, state: str, tool: str = "browser_fill_form") -> Effect:
    return Effect(
        run_id="r1", key=key, tool=tool, input={}, state=state,  # type: ignore[arg-type]
        attempt=1, call_key=key, source="executor",
        intended_at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip


async def test_the_journal_is_read_per_run_and_judged(bus: Bus) -> None:
    assert await journal_of(bus, "r1") is None  # a build that keeps no journal
    kv = await bus.js.create_key_value(bucket=s.BUCKET_EFFECTS)
    await kv.put("r1.x1", encode(_effect("x1", "intended")))
    await kv.put("r1.x1", encode(_effect("x1", "done")))
    await kv.put("r1.x2", encode(_effect("x2", "in_doubt", "browser_click")))
    await kv.put("r1.finished", b"{}")
    await kv.put("r2.x1", encode(_effect("x1", "intended")))
    journal = await journal_of(bus, "r1")
    assert journal is not None
    assert sorted((e.key, e.state) for e in journal) == [("x1", "done"), ("x2", "in_doubt")]
    case = Case(name="c", task_id="t", key="k", run_id="r1")
    done = _ending("completed", 1)
    assert judge(case, done, [done], 1, 1, None, journal).problems == [
        "journal: x2 in doubt, run not needs_attention"
    ]
