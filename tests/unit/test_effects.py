"""The run's effect journal (services/runner/effects.py) and how an attempt honours it
(services/runner/attempt.py): an action is recorded before it runs and settled after;
a later delivery never does it again; one nobody can account for stops the run as
`needs_attention`. Against a journal in memory and a scripted tools service; no NATS."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from contracts.base import utc_now
from contracts.effects import Effect
from contracts.errors import ErrorInfo
from contracts.executors import (
    ActiveExecutor,
    ContainsText,
    ExecutorHealth,
    ExecutorStep,
    ResultStep,
    ToolStep,
)
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    ContentBlock,
    TextBlock,
    TextEvent,
    ToolDefinition,
    ToolUseBlock,
    Usage,
)
from contracts.runs import RunEvent, RunRequest
from contracts.tasks import TaskSpec
from contracts.tools import CallState, CallStatus, CallStatusQuery, ExecTool, ToolResult
from services.runner.attempt import Limits, RunAttempt
from services.runner.effects import (
    ActionInDoubt,
    MemoryEffects,
    RunEffects,
    resume_note,
)
from services.runner.ports import PortError, Ports
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

RUN, TASK = "run-1", "orders"
FORM = {"fields": {"name": "Ada"}}


def call(
    tool: str = "browser_fill_form", tool_input: dict | None = None, step: int = 1
) -> ExecTool:
    return ExecTool(
        run_id=RUN,
        task_id=TASK,
        allowed_tools=[tool],
        tool=tool,
        input=FORM if tool_input is None else tool_input,
        step=step,
        source="executor",
        timeout_s=5.0,
    )


@dataclass
class Tools:
    """A tools service that counts what it ran, by idempotency key, and answers status
    queries from `status` (what the test says became of a call)."""

    ran: list[ExecTool] = field(default_factory=list)
    fail_with: PortError | None = None
    status: list[CallState] = field(default_factory=list)
    asked: list[CallStatusQuery] = field(default_factory=list)

    async def send(self, request: ExecTool) -> ToolResult:
        self.ran.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        return ToolResult(ok=True, output=f"submitted {len(self.ran)}", duration_ms=3)

    async def check(self, query: CallStatusQuery) -> CallStatus:
        self.asked.append(query)
        state = self.status.pop(0) if self.status else "fenced"
        result = ToolResult(ok=True, output="submitted earlier", duration_ms=3)
        return CallStatus(
            run_id=query.run_id,
            key=query.key,
            state=state,
            result=result if state == "finished" else None,
            until=utc_now() + timedelta(seconds=0.2),
        )


def intended(key: str = "x1", attempt: int = 1) -> Effect:
    return Effect(
        run_id=RUN,
        key=key,
        tool="browser_fill_form",
        input=FORM,
        state="intended",
        attempt=attempt,
        call_key=f"{key}~{attempt}~0",
        source="executor",
        intended_at=utc_now(),
        timeout_s=1.0,
        step=1,
    )


async def test_an_action_is_recorded_before_it_runs_and_settled_after() -> None:
    store, tools = MemoryEffects(), Tools()
    seen: list[str] = []

    async def send(request: ExecTool) -> ToolResult:
        seen.append(store.effects[(RUN, "x1")].state)  # what the journal held as it ran
        return await tools.send(request)

    effects = RunEffects(RUN, 1, store, tools.check)
    result = await effects.run_step("x1", call(), send)
    assert result.output == "submitted 1"
    assert seen == ["intended"]
    assert tools.ran[0].idempotency_key == "x1~1~0"
    done = store.effects[(RUN, "x1")]
    assert (done.state, done.ok, done.output) == ("done", True, "submitted 1")


async def test_a_later_delivery_gets_a_done_action_from_the_journal() -> None:
    store, tools = MemoryEffects(), Tools()
    await RunEffects(RUN, 1, store, tools.check).run_step("x1", call(), tools.send)
    again, ended = await RunEffects.load(RUN, 2, store, tools.check)
    assert ended is None
    result = await again.run_step("x1", call(), tools.send)
    assert len(tools.ran) == 1  # the form went once
    assert result.ok and result.output == "submitted 1"
    assert again.answered == 1


@pytest.mark.parametrize(
    ("said", "state", "runs_again"),
    [("finished", "done", False), ("fenced", "not_done", True), ("in_doubt", "in_doubt", False)],
)
async def test_an_earlier_deliverys_unsettled_action_is_settled_by_asking_the_tools_service(
    said: CallState, state: str, runs_again: bool
) -> None:
    store, tools = MemoryEffects(), Tools(status=[said])
    await store.put(intended())
    effects, _ = await RunEffects.load(RUN, 2, store, tools.check)
    if state == "in_doubt":
        with pytest.raises(ActionInDoubt) as doubt:
            await effects.settle_earlier()
        assert "step 1 (browser_fill_form)" in str(doubt.value)
    else:
        await effects.settle_earlier()
    assert [q.key for q in tools.asked] == ["x1~1~0"] and tools.asked[0].fence
    assert store.effects[(RUN, "x1")].state == state
    if state == "in_doubt":
        return
    result = await effects.run_step("x1", call(), tools.send)
    assert len(tools.ran) == (1 if runs_again else 0)
    if runs_again:  # under a key of its own: the fenced one never runs
        assert tools.ran[0].idempotency_key == "x1~2~1"
    else:
        assert result.output == "submitted earlier"


async def test_a_call_still_running_elsewhere_is_waited_for() -> None:
    store, tools = MemoryEffects(), Tools(status=["running", "running", "finished"])
    await store.put(intended())
    effects, _ = await RunEffects.load(RUN, 2, store, tools.check)
    await effects.settle_earlier()
    assert len(tools.asked) == 3
    assert store.effects[(RUN, "x1")].state == "done"


async def test_with_nothing_to_ask_an_unsettled_action_is_in_doubt() -> None:
    store = MemoryEffects()
    await store.put(intended())
    effects, _ = await RunEffects.load(RUN, 2, store, None)
    with pytest.raises(ActionInDoubt):
        await effects.settle_earlier()
    assert store.effects[(RUN, "x1")].state == "in_doubt"


@pytest.mark.parametrize(
    ("said", "outcome"),
    [("finished", "answered"), ("fenced", "failed"), ("in_doubt", "in_doubt")],
)
async def test_a_lost_reply_is_settled_at_once(said: CallState, outcome: str) -> None:
    tools = Tools(fail_with=PortError("timeout", "no reply"), status=[said])
    effects = RunEffects(RUN, 1, MemoryEffects(), tools.check)
    if outcome == "answered":
        result = await effects.run_step("x1", call(), tools.send)
        assert result.output == "submitted earlier"
    elif outcome == "failed":
        with pytest.raises(PortError):
            await effects.run_step("x1", call(), tools.send)
        assert effects.effects["x1"].state == "not_done"
    else:
        with pytest.raises(ActionInDoubt):
            await effects.run_step("x1", call(), tools.send)
    assert len(tools.ran) == 1


async def test_a_call_that_never_reached_a_tools_service_did_not_act() -> None:
    tools = Tools(fail_with=PortError("unavailable", "no responders"))
    effects = RunEffects(RUN, 1, MemoryEffects(), tools.check)
    with pytest.raises(PortError):
        await effects.run_step("x1", call(), tools.send)
    assert effects.effects["x1"].state == "not_done" and tools.asked == []


async def test_an_action_whose_intent_cannot_be_recorded_does_not_run() -> None:
    class Broken(MemoryEffects):
        async def put(self, effect: Effect) -> None:
            raise ConnectionError("NATS is away")

    tools = Tools()
    effects = RunEffects(RUN, 1, Broken(), tools.check)
    with pytest.raises(PortError) as refused:
        await effects.run_step("x1", call(), tools.send)
    assert refused.value.code == "unavailable" and tools.ran == []


async def test_an_action_that_found_nothing_to_act_on_may_run_again() -> None:
    store, tools = MemoryEffects(), Tools()
    missed = Effect(
        **{
            **{f: getattr(intended(), f) for f in Effect.__struct_fields__},
            "state": "done",
            "ok": False,
            "error": ErrorInfo(code="element_not_found", message="no #submit"),
        }
    )
    await store.put(missed)
    effects, _ = await RunEffects.load(RUN, 2, store, tools.check)
    await effects.run_step("x1", call(), tools.send)
    assert [r.idempotency_key for r in tools.ran] == ["x1~2~1"]


async def test_a_full_run_repeating_a_done_action_gets_its_result_once() -> None:
    store, tools = MemoryEffects(), Tools()
    await RunEffects(RUN, 1, store, tools.check).run_step("x1", call(), tools.send)
    effects, _ = await RunEffects.load(RUN, 2, store, tools.check)
    loop = [call(step=0), call(tool_input={"fields": {"name": "Bob"}}, step=1), call(step=2)]
    outputs = [(await effects.run_call(c, tools.send)).output for c in loop]
    # The repeat is answered; another input acts; a second identical call is meant.
    assert outputs == ["submitted 1", "submitted 2", "submitted 3"]
    assert [r.idempotency_key for r in tools.ran] == [
        "x1~1~0",
        "b2-1~2~0",
        "b2-2~2~0",
    ]
    assert effects.answered == 1
    note = resume_note(effects.happened())
    assert note is not None and "browser_fill_form" in note and "Ada" in note


async def test_reads_are_not_journaled() -> None:
    store, tools = MemoryEffects(), Tools()
    effects = RunEffects(RUN, 1, store, tools.check)
    await effects.run_call(call("browser_read_page", {}), tools.send)
    await effects.run_call(call("browser_read_page", {}), tools.send)
    assert len(tools.ran) == 2 and store.effects == {}


# --- an attempt honouring the journal --------------------------------------------------


@dataclass
class Run:
    """Scripted llm and tools for a task that submits a form: the executor (when given)
    submits at step 0; the model submits, then answers."""

    tools: Tools = field(default_factory=Tools)
    active: ActiveExecutor | None = None
    model_turns: int = 0

    def ports(self) -> Ports:
        async def complete(req: CompleteRequest) -> CompleteReply:
            self.model_turns += 1
            content: list[ContentBlock] = (
                [ToolUseBlock(id="u1", name="browser_fill_form", input=FORM)]
                if self.model_turns == 1
                else [TextBlock(text="Signed up")]
            )
            stop = "tool_use" if self.model_turns == 1 else "end_turn"
            usage = Usage(input_tokens=10, output_tokens=2)
            return CompleteReply(
                id="m", model="claude-sonnet-4-5", content=content, stop_reason=stop,
                usage=usage, cost_usd=0.01,
            )  # fmt: skip

        async def list_tools(names: list[str]) -> list[ToolDefinition]:
            return []

        async def publish_text(event: TextEvent) -> None:
            pass

        async def active_executor(task_id: str) -> ActiveExecutor | None:
            return self.active

        async def close_session(run_id: str, attempt: int) -> None:
            pass

        return Ports(
            complete=complete,
            exec_tool=self.tools.send,
            list_tools=list_tools,
            publish_text=publish_text,
            active_executor=active_executor,
            close_session=close_session,
            call_status=self.tools.check,
        )


def submit_executor() -> ActiveExecutor:
    steps: list[ExecutorStep] = [
        ToolStep(index=0, tool="browser_fill_form", input=FORM),
        ResultStep(index=1, mode="template", template="Signed up"),
    ]
    return ActiveExecutor(
        executor=hand_built_executor(TASK, steps, version=2),
        health=ExecutorHealth(task_id=TASK, status="active", version=2),
    )


async def attempt(run: Run, store: MemoryEffects, attempt_no: int):  # type: ignore[no-untyped-def]
    spec = TaskSpec(name=TASK, prompt="Sign up", allowed_tools=["browser_fill_form"])
    request = RunRequest(run_id=RUN, task_id=TASK, spec=spec, requested_at=utc_now())
    effects, _ = await RunEffects.load(RUN, attempt_no, store, run.tools.check)
    published: list[RunEvent] = []

    async def publish(event: RunEvent, msg_id: str) -> None:
        published.append(event)

    transcript = TranscriptRecorder(RUN, TASK)
    result = await RunAttempt(
        request,
        attempt_no,
        ports=run.ports(),
        transcript=transcript,
        limits=Limits(replay_retries=0, replay_backoff_s=0.0),
        publish=publish,
        effects=effects,
    ).run(0.0, None)
    return result, transcript


@pytest.mark.parametrize("replays", [True, False])
async def test_a_redelivered_run_does_not_submit_again(replays: bool) -> None:
    store = MemoryEffects()
    run = Run(active=submit_executor() if replays else None)
    first, _ = await attempt(run, store, 1)
    assert first.outcome.ok and len(run.tools.ran) == 1
    run.model_turns = 0
    second, transcript = await attempt(run, store, 2)
    assert second.outcome.ok and second.resumed_actions == 1
    assert len(run.tools.ran) == 1  # the second delivery did not submit
    if not replays:  # the model was told what had happened
        prompt = transcript.entries[0].message
        assert prompt is not None and "already happened" in str(prompt.content)


async def test_an_action_in_doubt_stops_the_run_for_a_person() -> None:
    store = MemoryEffects()
    await store.put(intended("x0"))
    run = Run(tools=Tools(status=["in_doubt"]), active=submit_executor())
    result, _ = await attempt(run, store, 2)
    assert result.outcome.reason == "needs_attention"
    assert "browser_fill_form" in (result.outcome.error or "")
    assert run.tools.ran == [] and run.model_turns == 0  # neither replayed nor run in full


async def test_a_resumed_replay_that_then_breaks_is_not_held_against_the_executor() -> None:
    """Its read after the answered submit sees the page as it loads now, not as the
    submit left it: the failure says nothing of the executor."""
    steps: list[ExecutorStep] = [
        ToolStep(index=0, tool="browser_fill_form", input=FORM),
        ToolStep(
            index=1, tool="browser_read_page", input={}, expect=[ContainsText(text="Welcome")]
        ),
        ResultStep(index=2, mode="template", template="Signed up"),
    ]
    active = ActiveExecutor(
        executor=hand_built_executor(TASK, steps, version=2),
        health=ExecutorHealth(task_id=TASK, status="active", version=2),
    )
    store = MemoryEffects()
    run = Run(active=active)
    first, _ = await attempt(run, store, 1)
    assert first.replay is not None and not first.replay.ok
    assert not first.replay.infrastructure  # a plain broken replay counts
    run.model_turns = 0
    second, _ = await attempt(run, store, 2)
    assert second.replay is not None and not second.replay.ok
    assert second.replay.infrastructure
    assert [r.tool for r in run.tools.ran].count("browser_fill_form") == 1


async def test_a_replay_of_another_version_does_not_submit_what_the_run_already_did() -> None:
    store, tools = MemoryEffects(), Tools()
    await RunEffects(RUN, 1, store, tools.check).run_step("x1-0", call(), tools.send)
    effects, _ = await RunEffects.load(RUN, 2, store, tools.check)
    # v2's step 0 is the same submit; its step 3 submits the same form once more, meant.
    first = await effects.run_step("x2-0", call(), tools.send)
    second = await effects.run_step("x2-3", call(), tools.send)
    assert first.output == "submitted 1" and second.output == "submitted 2"
    assert [r.idempotency_key for r in tools.ran] == ["x1-0~1~0", "x2-3~2~0"]


async def test_an_outcome_the_journal_refuses_once_is_recorded_when_it_takes_it() -> None:
    """A JetStream leader election: the outcome's put fails, then goes through."""

    class Electing(MemoryEffects):
        refusals = 1

        async def put(self, effect: Effect) -> None:
            if effect.state == "done" and self.refusals:
                self.refusals -= 1
                raise TimeoutError("no leader")
            await super().put(effect)

    store, tools = Electing(), Tools()
    await RunEffects(RUN, 1, store, tools.check).run_step("x1-1", call(), tools.send)
    assert store.effects[(RUN, "x1-1")].state == "done" and store.refusals == 0
