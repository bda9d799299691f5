"""The agent loop's own rules, against scripted ports (no NATS): the conversation sent
to the model stays under the bus's max payload, only a finished answer counts as
success, and a lost text event costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import msgspec
import pytest

from contracts.errors import ErrorInfo
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    ContentBlock,
    Message,
    TextBlock,
    TextEvent,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolResult
from services.kernel.codec import encode
from services.runner.accounting import Ledger
from services.runner.agent_loop import (
    AGENT_MAX_TOKENS,
    SYSTEM_PROMPT,
    AgentLoop,
    AgentOutcome,
    elided_note,
    fit_request,
)
from services.runner.ports import PortError, Ports, RunScope
from services.runner.transcript import TranscriptRecorder
from services.tools.limits import inner_timeout

pytestmark = pytest.mark.anyio

TOOL = ToolDefinition(name="browser_read_page", description="read", input_schema={})


def reply(content: list[ContentBlock], stop_reason: str | None) -> CompleteReply:
    return CompleteReply(
        id="m",
        model="claude-sonnet-5-5",
        content=content,
        stop_reason=stop_reason,
        usage=Usage(input_tokens=10, output_tokens=2),
        cost_usd=0.001,
    )


def tool_turn(n: int) -> list[ContentBlock]:
    """What current models send beside a tool call: a thinking block (empty text, a
    signature) and a little text."""
    return [
        ThinkingBlock(thinking="", signature=f"sig-{n}=="),
        TextBlock(text=f"Reading page {n}."),
        ToolUseBlock(id=f"toolu_{n}", name="browser_read_page", input={"page": n}),
    ]


class Model:
    """Answers each request with `decide(request)` and keeps what it was sent."""

    def __init__(self, decide: Callable[[CompleteRequest], CompleteReply]) -> None:
        self.decide = decide
        self.requests: list[CompleteRequest] = []
        # As sent: the loop's own conversation goes on growing after a call.
        self.sizes: list[int] = []

    async def complete(self, request: CompleteRequest) -> CompleteReply:
        self.requests.append(request)
        self.sizes.append(len(encode(request)))
        return self.decide(request)


def page_output(n: int, size: int) -> str:
    return f"page {n}: " + "y" * size


def scope_of(
    model: Model,
    *,
    prompt: str = "Read every page",
    output_size: int = 1000,
    max_payload: int | None = None,
    publish_text: Callable[[TextEvent], Any] | None = None,
) -> RunScope:
    async def exec_tool(request: ExecTool) -> ToolResult:
        return ToolResult(
            ok=True, output=page_output(request.input["page"], output_size), duration_ms=1
        )

    async def list_tools(names: list[str]) -> list[ToolDefinition]:
        return [TOOL]

    async def published(event: TextEvent) -> None:
        pass

    async def no_executor(task_id: str) -> None:
        return None

    async def close_session(run_id: str, attempt: int) -> None:
        pass

    extra = {} if max_payload is None else {"max_payload": max_payload}
    ports = Ports(
        complete=model.complete,
        exec_tool=exec_tool,
        list_tools=list_tools,
        publish_text=publish_text or published,
        active_executor=no_executor,
        close_session=close_session,
        **extra,
    )
    return RunScope(
        spec=TaskSpec(name="t", prompt=prompt, max_iterations=30),
        ports=ports,
        run_id="r",
        task_id="t",
        attempt=1,
        transcript=TranscriptRecorder("r", "t"),
    )


async def run(scope: RunScope) -> AgentOutcome:
    return await AgentLoop(scope, ledger=Ledger()).run()


# --- the request fits the bus ------------------------------------------------------------


async def test_a_long_conversation_is_sent_under_the_max_payload_oldest_outputs_first() -> None:
    max_payload, output_size, pages = 200_000, 60_000, 8
    model = Model(
        lambda r: (
            reply(tool_turn(len(r.messages) // 2), "tool_use")
            if len(r.messages) // 2 < pages
            else reply([TextBlock(text="Read all 8 pages.")], "end_turn")
        )
    )
    outcome = await run(scope_of(model, output_size=output_size, max_payload=max_payload))

    assert outcome.ok and outcome.result == "Read all 8 pages."
    # Eight outputs of 60 KB are 480 KB: without fitting, the later requests overflow.
    assert len(model.sizes) == pages + 1 and max(model.sizes) <= max_payload
    last = model.requests[-1]
    # Assistant turns go back exactly as the model sent them, signatures included.
    assistant = [m.content for m in last.messages if m.role == "assistant"]
    assert assistant == [tool_turn(n) for n in range(pages)]
    results = [
        b
        for m in last.messages
        if m.role == "user" and isinstance(m.content, list)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [b.tool_use_id for b in results] == [f"toolu_{n}" for n in range(pages)]
    whole = [b.content == page_output(n, output_size) for n, b in enumerate(results)]
    # The oldest are elided, the newest kept whole: a run of notes, then whole outputs.
    assert whole == sorted(whole) and whole[-1] and not whole[0]
    assert results[0].content == elided_note(len(page_output(0, output_size)))
    assert "elided to fit the request: 60008 chars" in str(results[0].content)
    assert last.messages[0] == Message(role="user", content="Read every page")


async def test_a_short_conversation_is_sent_untouched() -> None:
    request = CompleteRequest(
        messages=[
            Message(role="user", content="task"),
            Message(role="assistant", content=tool_turn(0)),
            Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_0", content="ok")]),
        ]
    )
    assert fit_request(request, 100_000) == (request, 0)


async def test_a_conversation_that_cannot_fit_ends_the_run_as_an_llm_error() -> None:
    model = Model(lambda r: reply([TextBlock(text="never")], "end_turn"))
    # The prompt alone is over the limit: no tool output to elide would help.
    outcome = await run(scope_of(model, prompt="p" * 300_000, max_payload=200_000))
    assert not outcome.ok and outcome.reason == "llm_error"
    assert outcome.error is not None and "does not fit one model request" in outcome.error
    assert model.requests == []  # nothing sent (and paid) that the bus would refuse


# --- only a finished answer is a success ------------------------------------------------


@pytest.mark.parametrize(
    ("content", "stop_reason", "expected"),
    [
        ([TextBlock(text="I can't help with that.")], "refusal", "refused"),
        ([TextBlock(text="Top 5 stories:\n1. A\n2. B\n3")], "max_tokens", "cut off"),
        ([], "max_tokens", "cut off"),
        ([TextBlock(text="  ")], "end_turn", "empty"),
        ([ThinkingBlock(thinking="", signature="s")], "end_turn", "empty"),
        ([TextBlock(text="partial")], "pause_turn", "stop_reason pause_turn"),
        ([TextBlock(text="an answer")], None, "stop_reason None"),
    ],
)
async def test_a_refused_cut_off_or_empty_reply_fails_the_run(
    content: list[ContentBlock], stop_reason: str, expected: str
) -> None:
    model = Model(lambda r: reply(content, stop_reason))
    outcome = await run(scope_of(model))
    assert not outcome.ok and outcome.reason == "llm_error" and outcome.result is None
    assert outcome.error is not None and expected in outcome.error
    if stop_reason is not None:
        assert stop_reason in outcome.error  # the error names the stop reason
    assert outcome.ledger.cost_usd == 0.001  # the reply was paid for all the same


async def test_a_tool_call_cut_off_at_max_tokens_is_not_run() -> None:
    """The API cuts a turn at max_tokens wherever it is, a tool call's input too: half a
    form filled in, half a command, must not be acted on."""
    ran: list[ExecTool] = []
    model = Model(lambda r: reply(tool_turn(0), "max_tokens"))
    scope = scope_of(model)
    exec_tool = scope.ports.exec_tool

    async def counted(request: ExecTool) -> ToolResult:
        ran.append(request)
        return await exec_tool(request)

    outcome = await run(replace(scope, ports=replace(scope.ports, exec_tool=counted)))
    assert not outcome.ok and outcome.reason == "llm_error"
    assert outcome.error is not None and "cut off at max_tokens" in outcome.error
    assert "inside a tool call" in outcome.error
    assert ran == [] and len(model.requests) == 1


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        # Cut off like at max_tokens, by the context window instead: the input may be half.
        ("model_context_window_exceeded", "cut off at the model's context window"),
        # The safety classifiers stopped the turn: what it asked for is not acted on.
        ("refusal", "refused"),
    ],
)
async def test_a_tool_call_in_a_turn_cut_off_or_refused_is_not_run(
    stop_reason: str, expected: str
) -> None:
    ran: list[ExecTool] = []
    model = Model(lambda r: reply(tool_turn(0), stop_reason))
    scope = scope_of(model)
    exec_tool = scope.ports.exec_tool

    async def counted(request: ExecTool) -> ToolResult:
        ran.append(request)
        return await exec_tool(request)

    outcome = await run(replace(scope, ports=replace(scope.ports, exec_tool=counted)))
    assert not outcome.ok and outcome.reason == "llm_error"
    assert outcome.error is not None and expected in outcome.error
    assert f"stop_reason {stop_reason}" in outcome.error and "nothing was run" in outcome.error
    assert ran == [] and len(model.requests) == 1


async def test_each_turn_has_room_to_think_before_it_acts() -> None:
    """The current models' thinking counts against max_tokens: the request's default
    (4096) would cut hard turns off."""
    model = Model(lambda r: reply([TextBlock(text="done")], "end_turn"))
    await run(scope_of(model))
    assert [r.max_tokens for r in model.requests] == [AGENT_MAX_TOKENS]
    assert AGENT_MAX_TOKENS >= 16_000


@pytest.mark.parametrize("stop_reason", ["end_turn", "stop_sequence"])
async def test_a_finished_answer_is_the_runs_result(stop_reason: str) -> None:
    model = Model(lambda r: reply([TextBlock(text="Title: Example")], stop_reason))
    outcome = await run(scope_of(model))
    assert outcome.ok and outcome.result == "Title: Example"


# --- what the model is given ------------------------------------------------------------


async def test_the_model_gets_the_system_prompt_the_task_and_only_the_allowed_tools() -> None:
    catalogue = {
        "browser_read_page": TOOL,
        "shell_exec": ToolDefinition(name="shell_exec", description="run", input_schema={}),
    }
    asked: list[list[str]] = []

    async def list_tools(names: list[str]) -> list[ToolDefinition]:
        asked.append(list(names))
        return [catalogue[n] for n in names]

    texts: list[str] = []

    async def publish(event: TextEvent) -> None:
        texts.append(event.text)

    model = Model(
        lambda r: (
            reply(tool_turn(0), "tool_use")
            if len(r.messages) == 1
            else reply([TextBlock(text="Done.")], "end_turn")
        )
    )
    scope = scope_of(model, prompt="Read page 0", publish_text=publish)
    scope = replace(
        scope,
        spec=msgspec.structs.replace(scope.spec, allowed_tools=["browser_read_page"]),
        ports=replace(scope.ports, list_tools=list_tools),
    )
    outcome = await run(scope)
    assert outcome.ok and outcome.result == "Done."
    assert asked == [["browser_read_page"]]
    assert len(model.requests) == 2
    for request in model.requests:
        assert request.system == SYSTEM_PROMPT
        assert [t.name for t in request.tools] == ["browser_read_page"]
        assert request.messages[0] == Message(role="user", content="Read page 0")
    # Every text block the model wrote is a text event, in order, the answer last.
    assert texts == ["Reading page 0.", "Done."]


# --- the text event is best effort -------------------------------------------------------


async def test_a_text_event_that_cannot_be_published_does_not_stop_the_run(
    written_logs: list[dict[str, Any]],
) -> None:
    async def ack_timeout(event: TextEvent) -> None:
        raise TimeoutError("nats: timeout waiting for the stream's ack")

    model = Model(
        lambda r: (
            reply(tool_turn(0), "tool_use")
            if len(r.messages) == 1
            else reply([TextBlock(text="Done.")], "end_turn")
        )
    )
    outcome = await run(scope_of(model, publish_text=ack_timeout))
    assert outcome.ok and outcome.result == "Done." and outcome.tool_calls == 1
    warnings = [e for e in written_logs if e.get("event") == "llm_text_unpublished"]
    assert len(warnings) == 2  # "Reading page 0." and "Done."
    assert warnings[0]["level"] == "warning" and "ack" in warnings[0]["error"]


# --- whose fault a failure is ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "infrastructure"),
    [
        ("unavailable", True),  # no llm service answers: not the task's fault
        ("rate_limited", True),  # nor is the model API's load, through every retry
        ("overloaded", True),
        ("upstream", True),
        ("invalid_request", False),
        ("auth", False),  # fails every run: pausing the task says so
        ("over_budget", False),
    ],
)
async def test_a_model_call_that_cannot_be_served_is_an_infrastructure_failure(
    code: str, infrastructure: bool
) -> None:
    def unreachable(request: CompleteRequest) -> CompleteReply:
        raise PortError(code, "no reply")

    outcome = await run(scope_of(Model(unreachable)))
    assert (outcome.ok, outcome.reason, outcome.infrastructure) == (
        False,
        "llm_error",
        infrastructure,
    )


# --- a tool's failure, as the model reads it ----------------------------------------------


def command_turn(command_input: dict[str, Any]) -> Callable[[CompleteRequest], CompleteReply]:
    """A model that runs shell_exec with `command_input` until it has run it three times."""

    def decide(request: CompleteRequest) -> CompleteReply:
        n = len(request.messages) // 2
        if n < 3:
            use = ToolUseBlock(id=f"toolu_{n}", name="shell_exec", input=command_input)
            return reply([use], "tool_use")
        return reply([TextBlock(text="Gave up.")], "end_turn")

    return decide


def with_exec(scope: RunScope, exec_tool: Callable[[ExecTool], Any]) -> RunScope:
    return replace(scope, ports=replace(scope.ports, exec_tool=exec_tool))


async def test_a_failed_commands_output_so_far_reaches_the_model_and_still_counts_as_stuck() -> (
    None
):
    """A command killed at its timeout returns what it printed (a prompt waiting for an
    answer): the model needs it to do better next time. The run is still stuck when the
    same error comes back, whatever the output around it."""
    calls: list[int] = []

    async def hangs(request: ExecTool) -> ToolResult:
        calls.append(1)
        return ToolResult(
            ok=False,
            output={"exit_code": -9, "stdout": f"[{len(calls)}] Proceed? [y/N]", "stderr": ""},
            duration_ms=1,
            error=ErrorInfo(code="timeout", message="command did not finish within 54s"),
        )

    model = Model(command_turn({"command": "./deploy.sh"}))
    outcome = await run(with_exec(scope_of(model), hangs))
    sent = model.requests[1].messages[2].content  # the first result
    assert isinstance(sent, list) and isinstance(sent[0], ToolResultBlock)
    assert sent[0].is_error
    assert isinstance(sent[0].content, str)
    assert sent[0].content.startswith("timeout: command did not finish within 54s")
    assert "Proceed? [y/N]" in sent[0].content
    assert not outcome.ok and outcome.reason == "stuck"
    assert outcome.error == (
        "shell_exec failed 3 times in a row: timeout: command did not finish within 54s"
    )


async def test_a_command_given_its_own_timeout_gets_the_time_for_it() -> None:
    """shell_exec takes a `timeout` of up to 600 s; the tools service runs the command
    within the call's own time, so a call given only the default would kill a 300 s
    command after 54 s, every time."""
    sent: list[ExecTool] = []

    async def runs(request: ExecTool) -> ToolResult:
        sent.append(request)
        return ToolResult(ok=True, output={"exit_code": 0}, duration_ms=1)

    model = Model(command_turn({"command": "make test", "timeout": 300}))
    outcome = await run(with_exec(scope_of(model), runs))
    assert outcome.ok
    assert all(inner_timeout(r.timeout_s) >= 300 for r in sent)
    assert all(r.timeout_s <= 600 for r in sent)
    # Never past the run's time left; a call without a timeout of its own keeps the default.
    scope = with_exec(scope_of(Model(command_turn({"command": "make test", "timeout": 300}))), runs)
    sent.clear()
    await AgentLoop(scope, ledger=Ledger(), tool_timeout_s=60, max_tool_timeout_s=100).run()
    assert {r.timeout_s for r in sent} == {100}
    scope = with_exec(scope_of(Model(command_turn({"command": "ls"}))), runs)
    sent.clear()
    await AgentLoop(scope, ledger=Ledger(), tool_timeout_s=60, max_tool_timeout_s=100).run()
    assert {r.timeout_s for r in sent} == {60}


# --- the run's deadline -------------------------------------------------------------------


class SlowModel(Model):
    """A model that takes `delay_s` over each turn."""

    def __init__(self, decide: Callable[[CompleteRequest], CompleteReply], delay_s: float) -> None:
        super().__init__(decide)
        self.delay_s = delay_s

    async def complete(self, request: CompleteRequest) -> CompleteReply:
        await anyio.sleep(self.delay_s)
        return await super().complete(request)


async def test_a_tool_call_gets_no_more_time_than_the_run_has_left() -> None:
    """A call asked for late in a run is given what is left of the run, not what was left
    when the loop began: the tools service would otherwise go on running it (a command,
    for minutes) after the run has ended at its deadline."""
    sent: list[ExecTool] = []

    async def runs(request: ExecTool) -> ToolResult:
        sent.append(request)
        return ToolResult(ok=True, output={"exit_code": 0}, duration_ms=1)

    model = SlowModel(command_turn({"command": "make test", "timeout": 300}), delay_s=0.5)
    scope = with_exec(scope_of(model), runs)
    deadline = anyio.current_time() + 3.0
    loop = AgentLoop(scope, ledger=Ledger(), max_tool_timeout_s=3.0, deadline=deadline)
    outcome = await loop.run()
    assert outcome.ok and len(sent) == 3
    # Asked after 0.5 s, 1 s and 1.5 s of the run's 3 s.
    for n, request in enumerate(sent, 1):
        assert 0 < request.timeout_s <= 3.0 - 0.5 * n


async def test_no_tool_call_starts_once_the_runs_deadline_has_passed() -> None:
    ran: list[ExecTool] = []

    async def counted(request: ExecTool) -> ToolResult:
        ran.append(request)
        return ToolResult(ok=True, output="x", duration_ms=1)

    # The model's turn comes back after the deadline (before the caller's cancel did).
    model = SlowModel(command_turn({"command": "./deploy.sh"}), delay_s=0.3)
    scope = with_exec(scope_of(model), counted)
    loop = AgentLoop(scope, ledger=Ledger(), deadline=anyio.current_time() + 0.1)
    outcome = await loop.run()
    assert (outcome.ok, outcome.reason, outcome.tool_calls) == (False, "deadline", 0)
    assert ran == [] and len(model.requests) == 1
    assert outcome.ledger.cost_usd == 0.001  # the turn was paid for all the same


async def test_no_model_call_starts_once_the_runs_deadline_has_passed() -> None:
    async def slow(request: ExecTool) -> ToolResult:
        await anyio.sleep(0.3)  # the call comes back after the deadline
        return ToolResult(ok=True, output="x", duration_ms=300)

    model = Model(command_turn({"command": "make"}))
    scope = with_exec(scope_of(model), slow)
    loop = AgentLoop(scope, ledger=Ledger(), deadline=anyio.current_time() + 0.1)
    outcome = await loop.run()
    assert (outcome.ok, outcome.reason, outcome.tool_calls) == (False, "deadline", 1)
    assert len(model.requests) == 1  # no second turn sent (and paid) past the deadline
