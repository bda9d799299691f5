"""One attempt at a run (services/runner/attempt.py) against scripted ports, and the prior
state a redelivery reads from the run's events (services/runner/prior.py): which path
runs, in what order the fallback happens, what the terminal event counts, and how the
deadline reads across deliveries. No NATS."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ActiveExecutor, ExecutorHealth, ExitCode, ResultStep, ToolStep
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    TextBlock,
    ToolDefinition,
    Usage,
)
from contracts.runs import ReplayOutcome, RunEvent, RunRequest
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolMetadata, ToolResult
from services.kernel.codec import encode
from services.runner.accounting import Ledger
from services.runner.agent_loop import AgentOutcome
from services.runner.attempt import (
    AttemptResult,
    Limits,
    RunAttempt,
    deadline_error,
    terminal_event,
)
from services.runner.ports import Ports
from services.runner.prior import PriorState, elapsed_since, prior_state
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor
from tests.scripted_replay import ports

pytestmark = pytest.mark.anyio

TASK, RUN = "orders", "run-1"


def request(deadline_s: float = 60.0) -> RunRequest:
    spec = TaskSpec(name=TASK, prompt="Order", allowed_tools=["shell_exec"], deadline_s=deadline_s)
    return RunRequest(run_id=RUN, task_id=TASK, spec=spec, requested_at=utc_now())


def executor() -> ActiveExecutor:
    """An executor whose one command must exit 0, whose answer is "Built"."""
    post = ToolStep(
        index=0, tool="shell_exec", input={"command": "make"}, expect=[ExitCode(code=0)]
    )
    return ActiveExecutor(
        executor=hand_built_executor(
            TASK, [post, ResultStep(index=1, mode="template", template="Built")], version=3
        ),
        # Replayed often enough that a clean replay is not checked (verification.py).
        health=ExecutorHealth(
            task_id=TASK, status="active", version=3, full_run_cost_usd=0.05, success_count=5
        ),
    )


@dataclass
class Services:
    """Scripted llm, tools and compiler; `calls` says what was asked, in order."""

    active: ActiveExecutor | None = None
    exit_code: int = 0  # what every command exits with
    calls: list[str] = field(default_factory=list)
    published: list[tuple[RunEvent, str]] = field(default_factory=list)

    def ports(self) -> Ports:
        async def complete(req: CompleteRequest) -> CompleteReply:
            self.calls.append("complete")
            return CompleteReply(
                id="m", model="claude-sonnet-5-5", content=[TextBlock(text="Built by hand")],
                stop_reason="end_turn", usage=Usage(input_tokens=10, output_tokens=2),
                cost_usd=0.01,
            )  # fmt: skip

        async def exec_tool(req: ExecTool) -> ToolResult:
            self.calls.append(f"exec:{req.source}")
            metadata = ToolMetadata(exit_code=self.exit_code)
            return ToolResult(ok=True, output="", duration_ms=1, metadata=metadata)

        async def list_tools(names: list[str]) -> list[ToolDefinition]:
            self.calls.append("list_tools")
            return []

        async def active_executor(task_id: str) -> ActiveExecutor | None:
            self.calls.append("active_executor")
            return self.active

        async def close_session(run_id: str, attempt: int) -> None:
            self.calls.append(f"close:{attempt}")

        return ports(complete, exec_tool, list_tools, active_executor, close_session)

    async def publish(self, event: RunEvent, msg_id: str) -> None:
        self.calls.append(f"publish:{event.event}")
        self.published.append((event, msg_id))


async def attempt(
    services: Services,
    attempt_no: int = 1,
    *,
    deadline_s: float = 60.0,
    elapsed_s: float = 0.0,
    earlier_replay: ReplayOutcome | None = None,
) -> tuple[AttemptResult, TranscriptRecorder]:
    transcript = TranscriptRecorder(RUN, TASK)
    run = RunAttempt(
        request(deadline_s),
        attempt_no,
        ports=services.ports(),
        transcript=transcript,
        limits=Limits(replay_retries=0, replay_backoff_s=0.0),
        publish=services.publish,
    )
    return await run.run(elapsed_s, earlier_replay), transcript


def notes(transcript: TranscriptRecorder) -> list[str]:
    return [str((e.detail or {}).get("text", "")) for e in transcript.entries if e.kind == "note"]


async def test_a_replay_that_succeeds_is_the_runs_answer_and_no_full_loop_runs() -> None:
    services = Services(active=executor())
    result, _ = await attempt(services)

    assert result.outcome.ok and result.outcome.result == "Built"
    assert (result.source, result.version, result.fell_back) == ("executor", 3, False)
    assert result.replay is not None and result.replay.ok
    assert result.loop_cost_usd is None  # no full loop ran
    assert services.calls == ["active_executor", "exec:executor"]
    event = terminal_event(request(), 1, result, duration_ms=5)
    assert (event.event, event.source, event.executor_version) == ("completed", "executor", 3)
    assert event.cost_saved_usd == pytest.approx(0.05)  # what a full run would have cost


async def test_a_failed_replay_is_published_then_the_full_run_starts_in_a_fresh_session() -> None:
    services = Services(active=executor(), exit_code=1)
    result, transcript = await attempt(services, attempt_no=2)

    # replay_failed goes out (a redelivery reads it) before path B's first call, and the
    # broken replay's browser session is closed in between.
    assert services.calls == [
        "active_executor", "exec:executor", "publish:replay_failed", "close:2", "list_tools",
        "complete",
    ]  # fmt: skip
    event, msg_id = services.published[0]
    assert msg_id == f"{RUN}:replay_failed:2" and event.attempt == 2
    assert event.replay is not None and (event.replay.ok, event.replay.step) == (False, 0)
    assert result.outcome.ok and result.outcome.result == "Built by hand"
    assert (result.source, result.version, result.fell_back) == ("full_llm", 3, True)
    assert result.loop_cost_usd == pytest.approx(0.01)
    assert any("replay of v3 failed at step 0" in n for n in notes(transcript))
    ended = terminal_event(request(), 2, result, duration_ms=5)
    assert ended.executor_version is None and ended.cost_saved_usd == 0.0


async def test_after_an_earlier_deliverys_failed_replay_only_the_full_run_runs() -> None:
    services = Services(active=executor())
    earlier = ReplayOutcome(version=3, ok=False, step=0, reason="exit code 1", attempt=1)
    result, transcript = await attempt(services, attempt_no=2, earlier_replay=earlier)

    assert services.calls == ["list_tools", "complete"]  # no replay, nothing published
    assert (result.source, result.version, result.fell_back) == ("full_llm", 3, True)
    assert result.replay == earlier  # the run's replay outcome is the earlier one
    assert any("delivery 1 replayed v3 and failed at step 0" in n for n in notes(transcript))


async def test_an_attempt_with_no_time_left_starts_nothing() -> None:
    services = Services(active=executor())
    result, _ = await attempt(services, attempt_no=2, deadline_s=3.0, elapsed_s=4.0)

    assert services.calls == []
    assert (result.outcome.ok, result.outcome.reason) == (False, "deadline")
    assert result.outcome.error == deadline_error(3.0, 2, 4.0)
    assert "deadline passed across its deliveries" in (result.outcome.error or "")


def test_what_earlier_attempts_spent_counts_in_the_cost_but_not_in_the_loops() -> None:
    ledger = Ledger()
    ledger.add(
        CompleteReply(
            id="m", model="claude-sonnet-5-5", content=[], stop_reason="end_turn",
            usage=Usage(input_tokens=10), cost_usd=0.01,
        )
    )  # fmt: skip
    result = AttemptResult(
        outcome=AgentOutcome(ok=True, result="done", ledger=ledger),
        ledger=ledger,
        source="full_llm",
        version=None,
        fell_back=False,
        replay=None,
        full_run_cost_usd=0.0,
        loop_cost_usd=0.01,
    )
    earlier = Ledger()
    earlier.add_usage("claude-sonnet-5-5", Usage(input_tokens=1000), 0.0123)
    result.ledger.merge(earlier)
    event = terminal_event(request(), 2, result, duration_ms=5)
    assert event.cost_usd == pytest.approx(0.0223) and event.loop_cost_usd == pytest.approx(0.01)
    assert event.tokens["claude-sonnet-5-5"].calls == 2 and event.attempt == 2


# --- the prior state, from the run's events --------------------------------------------


def run_event(
    event: s.RunEventName, at: datetime, attempt: int = 1, replay: ReplayOutcome | None = None
) -> tuple[str, bytes]:
    """One of the run's events as the stream holds it: (subject, data)."""
    published = RunEvent(
        task_id=TASK, run_id=RUN, event=event, at=at, attempt=attempt, replay=replay,
        status="requested" if event == "requested" else "running",
    )  # fmt: skip
    return s.run_event(TASK, RUN, event), encode(published)


def test_the_prior_state_is_the_first_start_and_the_last_failed_replay() -> None:
    first = utc_now() - timedelta(seconds=30)
    replay = ReplayOutcome(version=2, ok=False, step=1, reason="exit code 1")
    events = [
        run_event("requested", first - timedelta(seconds=1)),
        run_event("started", at=first + timedelta(seconds=20), attempt=2),
        run_event("started", at=first, attempt=1),
        (s.run_event(TASK, RUN, "started"), b"not a run event"),
        run_event("replay_failed", at=first, replay=replay, attempt=1),
    ]
    prior = prior_state(request(), events)

    assert prior.first_started_at == first
    # The replay's delivery, from the event when the outcome does not say it.
    assert prior.failed_replay is not None and prior.failed_replay.attempt == 1
    assert prior.failed_replay.version == 2
    assert prior.elapsed_s(first + timedelta(seconds=31)) == pytest.approx(31)


def test_an_unreadable_last_failed_replay_is_no_failed_replay() -> None:
    replay = ReplayOutcome(version=2, ok=False, step=1, reason="x")
    events = [
        run_event("replay_failed", at=utc_now(), replay=replay, attempt=1),
        (s.run_event(TASK, RUN, "replay_failed"), b"{}"),
    ]
    assert prior_state(request(), events) == PriorState()


def test_a_first_start_in_the_future_uses_none_of_the_deadline() -> None:
    now = utc_now()
    assert elapsed_since(now + timedelta(minutes=1), now) == 0.0
    assert elapsed_since(None, now) == 0.0
    assert PriorState().elapsed_s(now) == 0.0
