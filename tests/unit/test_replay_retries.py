"""A replay step is tried once, then retried as configured; never zero times. A step
failed by a service that could not answer is marked as not the executor's fault."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from contracts.errors import ErrorInfo
from contracts.executors import ContainsText, LlmStep, ResultStep, ToolStep, ValueLike
from contracts.llm import CompleteReply, CompleteRequest
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolResult
from services.runner.ports import PortError
from services.runner.replay import Replayer, ReplayResult, StepFailed, result_max_tokens
from services.tools.limits import inner_timeout
from tests.hand_built_replay import hand_built_executor, offline_scope, small_model_reply


def _replayer(retries: int) -> Replayer:
    executor = hand_built_executor("t", [ResultStep(index=0, mode="template")])
    return Replayer(executor, offline_scope(), retries=retries, backoff_s=0.0)


@pytest.mark.parametrize(("retries", "tries"), [(-1, 1), (0, 1), (1, 2), (3, 4)])
def test_a_failing_step_is_tried_once_plus_its_retries(retries: int, tries: int) -> None:
    replayer = _replayer(retries)
    calls: list[int] = []

    async def failing() -> None:
        calls.append(1)
        raise StepFailed(0, f"no match on try {len(calls)}")

    async def main() -> None:
        with pytest.raises(StepFailed, match=f"try {tries}"):
            await replayer._with_retries(0, failing)

    anyio.run(main)
    assert len(calls) == tries


def test_a_step_that_recovers_on_retry_returns_its_output() -> None:
    replayer = _replayer(1)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise StepFailed(0, "not yet")
        return "items"

    assert anyio.run(replayer._with_retries, 0, flaky) == "items"
    assert len(calls) == 2


def test_a_refusal_is_not_retried() -> None:
    """tool_not_allowed, path_denied, a malformed request: asking again cannot help."""
    replayer = _replayer(3)
    calls: list[int] = []

    async def refused() -> None:
        calls.append(1)
        raise StepFailed(0, "file_write: tool_not_allowed: not in allowed_tools", retryable=False)

    async def main() -> None:
        with pytest.raises(StepFailed, match="tool_not_allowed"):
            await replayer._with_retries(0, refused)

    anyio.run(main)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("code", "retried"),
    [("tool_not_allowed", False), ("path_denied", False), ("invalid_request", False),
     ("timeout", True), ("element_not_found", True), ("unavailable", True)],
)  # fmt: skip
def test_which_tool_errors_are_worth_a_retry(code: str, retried: bool) -> None:
    from services.runner.replay import _refused

    assert _refused(code) is not retried


def _replay_one_tool_step(exec_tool: object) -> ReplayResult:
    executor = hand_built_executor(
        "t",
        [
            ToolStep(index=0, tool="browser_navigate", input={"url": "http://x"}),
            ResultStep(index=1, mode="template", template="done"),
        ],
    )
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, exec_tool=exec_tool))
    return anyio.run(Replayer(executor, scope, retries=1, backoff_s=0.0).run)


@pytest.mark.parametrize(
    ("code", "infrastructure"),
    [("unavailable", True), ("timeout", True), ("internal", True),
     ("tool_not_allowed", False), ("invalid_request", False)],
)  # fmt: skip
def test_a_service_that_cannot_answer_is_not_the_executors_failure(
    code: str, infrastructure: bool
) -> None:
    """Tools service down: the replay fails, but marked so the executor's health does
    not count it (three outages in a row would otherwise retire a good executor)."""

    async def exec_tool(request: object) -> None:
        raise PortError(code, "no service answers rote.api.tools.exec")

    result = _replay_one_tool_step(exec_tool)
    assert not result.ok and result.failed_step == 0
    assert result.infrastructure is infrastructure


def test_a_tool_that_failed_on_the_page_is_the_executors_failure() -> None:
    async def exec_tool(request: object) -> ToolResult:
        error = ErrorInfo(code="element_not_found", message="no element matches #price")
        return ToolResult(ok=False, duration_ms=3, error=error)

    result = _replay_one_tool_step(exec_tool)
    assert not result.ok and not result.infrastructure


def test_a_page_lost_with_chromium_is_not_the_executors_failure_nor_retried() -> None:
    """The browser died under the run: the page the steps built up is gone. Reading
    again would read a blank page; the fallback starts the run's page over."""
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        error = ErrorInfo(code="session_lost", message="the browser restarted")
        return ToolResult(ok=False, duration_ms=3, error=error)

    result = _replay_one_tool_step(exec_tool)
    assert not result.ok and result.infrastructure
    assert calls == ["browser_navigate"]


def _replay_two_tool_steps(exec_tool: object) -> ReplayResult:
    """A search form submitted, then its results read: the submit expects text the
    page no longer shows."""
    executor = hand_built_executor(
        "t",
        [
            ToolStep(
                index=0,
                tool="browser_fill_form",
                input={"fields": {"#q": "rote"}, "submit": True},
                expect=[ContainsText(text="Results")],
            ),
            ResultStep(index=1, mode="template", template="done"),
        ],
    )
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, exec_tool=exec_tool))
    return anyio.run(Replayer(executor, scope, retries=2, backoff_s=0.0).run)


def test_an_action_that_ran_but_missed_its_expectation_is_not_done_twice() -> None:
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=True, output="Sign in to search", duration_ms=3)

    result = _replay_two_tool_steps(exec_tool)
    assert not result.ok and result.failed_step == 0
    assert calls == ["browser_fill_form"]  # submitted once; the fallback takes over


@pytest.mark.parametrize(
    ("code", "tries"),
    [("timeout", 1), ("browser_error", 1), ("element_not_found", 3), ("invalid_selector", 3)],
)
def test_an_action_that_may_have_acted_before_failing_is_not_done_twice(
    code: str, tries: int
) -> None:
    """A submit that timed out may have gone through: trying it again could order
    twice. One that matched nothing surely did not act, and is tried again."""
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=False, duration_ms=3, error=ErrorInfo(code=code, message="x"))

    result = _replay_two_tool_steps(exec_tool)
    assert not result.ok and result.failed_step == 0
    assert calls == ["browser_fill_form"] * tries


def test_an_action_failed_without_saying_why_is_not_done_twice() -> None:
    """A tools service that answers ok=False with no error (another implementation, an
    older version) may still have acted: without a code the replay cannot know."""
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=False, duration_ms=3)

    result = _replay_two_tool_steps(exec_tool)
    assert not result.ok and result.failed_step == 0
    assert calls == ["browser_fill_form"]


def test_a_read_that_missed_its_expectation_is_tried_again() -> None:
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=True, output="Loading…", duration_ms=3)

    executor = hand_built_executor(
        "t",
        [
            ToolStep(
                index=0, tool="browser_read_page", input={}, expect=[ContainsText(text="News")]
            ),
            ResultStep(index=1, mode="template", template="done"),
        ],
    )
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, exec_tool=exec_tool))
    result = anyio.run(Replayer(executor, scope, retries=2, backoff_s=0.0).run)
    assert not result.ok and calls == ["browser_read_page"] * 3


def _small_model_answer(stop_reason: str, text: str) -> tuple[ReplayResult, list[int]]:
    """A replay whose result step the small model writes; returns the result and the
    max_tokens of each request."""
    asked: list[int] = []

    async def complete(request: CompleteRequest) -> CompleteReply:
        asked.append(request.max_tokens)
        return small_model_reply(text, stop_reason)

    example = "Top stories:\n" + "\n".join(f"{i}. A headline of some length" for i in range(200))
    executor = hand_built_executor(
        "t", [ResultStep(index=0, mode="llm", prompt="Write it", example=example)]
    )
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, complete=complete))
    return anyio.run(Replayer(executor, scope, retries=1, backoff_s=0.0).run), asked


@pytest.mark.parametrize(
    ("stop_reason", "text", "tries"),
    [
        ("max_tokens", "Top stories:\n1. Council appro", 1),  # cut off: the same again
        ("refusal", "I can't help with that.", 1),
        ("end_turn", "", 2),  # empty: perhaps not next time
    ],
)
def test_a_cut_off_refused_or_empty_small_model_answer_fails_the_replay(
    stop_reason: str, text: str, tries: int
) -> None:
    result, asked = _small_model_answer(stop_reason, text)
    assert not result.ok and result.answer is None
    assert f"stop_reason {stop_reason}" in (result.reason or "")
    assert len(asked) == tries


def test_a_result_step_has_room_for_an_answer_longer_than_its_example() -> None:
    result, asked = _small_model_answer("end_turn", "Top stories:\n1. Today's headline")
    assert result.ok and result.answer == "Top stories:\n1. Today's headline"
    assert asked[0] >= 2048 and asked[0] * 4 >= 2 * 6000  # twice the ~6,000-char example


def test_a_result_step_in_a_script_of_a_token_a_character_has_room_for_its_answer() -> None:
    """Japanese or Chinese text is about a token a character, not four characters a
    token: a 3,000-character digest needs ~3,000 tokens, and an answer as long as its
    example (or a little longer today) must not be cut off on every replay."""
    example = "本日の主な見出し:\n" + "\n".join(
        f"{i}. 東京都議会が新しい予算案を承認しました" for i in range(150)
    )
    assert len(example) > 3000
    assert result_max_tokens(example) >= 2 * len(example)  # twice its ~1 token a character


@pytest.mark.parametrize(
    ("said", "typed"),
    [
        ("Blue Boots", ["Blue Boots"]),
        # An explanation where the value belongs: nothing is typed, the run falls back.
        ("Today's deal is different, so:\nBlue Boots", []),
    ],
)
def test_a_small_model_value_goes_into_the_tool_only_if_shaped_like_the_recorded_one(
    said: str, typed: list[str]
) -> None:
    sent: list[str] = []

    async def complete(request: CompleteRequest) -> CompleteReply:
        return small_model_reply(said)

    async def exec_tool(request: ExecTool) -> ToolResult:
        sent.append(request.input["text"])
        return ToolResult(ok=True, output={"url": "http://shop.test/search"}, duration_ms=1)

    executor = hand_built_executor(
        "t",
        [
            LlmStep(index=0, prompt="The deal", expect=[ValueLike(shape="line", max_chars=100)]),
            ToolStep(
                index=1,
                tool="browser_type",
                input={"selector": "#q", "text": "{{step_0}}"},
                templated=True,
            ),
            ResultStep(index=2, mode="template", template="searched"),
        ],
    )
    scope = offline_scope()
    ports = dataclasses.replace(scope.ports, complete=complete, exec_tool=exec_tool)
    replayer = Replayer(executor, dataclasses.replace(scope, ports=ports), retries=1, backoff_s=0.0)
    result = anyio.run(replayer.run)
    assert sent == typed
    if typed:
        assert result.ok and result.answer == "searched"
    else:
        assert not result.ok and result.failed_step == 0
        assert "expected one line" in (result.reason or "")


# --- the answer ------------------------------------------------------------------------


def _replay(steps: list[object], exec_tool: object) -> ReplayResult:
    executor = hand_built_executor("t", steps)  # type: ignore[arg-type]
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, exec_tool=exec_tool))
    return anyio.run(Replayer(executor, scope, retries=2, backoff_s=0.0).run)


@pytest.mark.parametrize("price", ["", "  \n"])
def test_a_replay_whose_answer_renders_blank_fails_at_its_result_step(price: str) -> None:
    """A blank answer is no answer, as in the full loop: the run falls back instead of
    completing with nothing (and the executor's health hears of it)."""
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=True, output={"price": price}, duration_ms=1)

    steps = [
        ToolStep(index=0, tool="browser_extract", input={"selector": ".p"}),
        ResultStep(index=1, mode="template", template="{{step_0.price}}", example="$12"),
    ]
    result = _replay(steps, exec_tool)
    assert not result.ok and result.answer is None
    assert (result.failed_step, result.reason) == (1, "empty answer")
    assert not result.infrastructure  # the executor's failure, not a service's
    assert calls == ["browser_extract"]  # the same outputs render the same: no retry


def test_an_executor_without_a_result_step_fails_before_any_step_acts() -> None:
    """Nothing would write the answer, and the fallback run does the actions again: a
    form submitted by the replay would be submitted twice."""
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        return ToolResult(ok=True, output="ok", duration_ms=1)

    steps = [
        ToolStep(index=0, tool="browser_navigate", input={"url": "http://x"}),
        ToolStep(index=1, tool="browser_fill_form", input={"fields": {"#q": "1"}, "submit": True}),
    ]
    result = _replay(steps, exec_tool)
    assert not result.ok and result.answer is None
    assert result.reason == "the executor has no result step"
    assert not result.infrastructure
    assert calls == []


# --- no reply from the tools service ---------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "code", "tries"),
    [
        ("browser_fill_form", "timeout", 1),  # it may have submitted before the reply was lost
        ("browser_fill_form", "internal", 1),
        ("shell_exec", "timeout", 1),
        ("file_write", "upstream", 1),
        ("browser_fill_form", "unavailable", 3),  # no tools service took the call
        ("browser_read_page", "timeout", 3),  # a read can be asked again
    ],
)
def test_an_action_whose_call_may_have_reached_the_tools_service_is_not_done_twice(
    tool: str, code: str, tries: int
) -> None:
    calls: list[str] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request.tool)
        raise PortError(code, "no reply from rote.api.tools.exec within 45s")

    steps = [
        ToolStep(index=0, tool=tool, input={}),
        ResultStep(index=1, mode="template", template="done", example="done"),
    ]
    result = _replay(steps, exec_tool)
    assert not result.ok and result.failed_step == 0
    assert calls == [tool] * tries


def test_a_replayed_command_with_its_own_timeout_gets_the_time_for_it() -> None:
    """The full run gave a 300 s command its time (agent_loop.call_timeout): its replay
    must too, or the command is killed after 54 s on every replay."""
    sent: list[ExecTool] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        sent.append(request)
        return ToolResult(ok=True, output={"exit_code": 0}, duration_ms=1)

    steps = [
        ToolStep(index=0, tool="shell_exec", input={"command": "make test", "timeout": 300}),
        ToolStep(index=1, tool="shell_exec", input={"command": "ls"}),
        ResultStep(index=2, mode="template", template="done", example="done"),
    ]
    assert _replay(steps, exec_tool).ok
    assert inner_timeout(sent[0].timeout_s) >= 300 and sent[0].timeout_s <= 600
    assert sent[1].timeout_s == 30.0  # the replayer's default


# --- the run's deadline ----------------------------------------------------------------


def test_a_replayed_call_gets_no_more_time_than_the_run_has_left() -> None:
    """A step replayed late in a run is given what is left of the run, not what was left
    when the replay began: the tools service would otherwise go on running it (a
    command, for minutes) after the run has ended at its deadline."""
    sent: list[ExecTool] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        sent.append(request)
        await anyio.sleep(0.5)
        return ToolResult(ok=True, output={"exit_code": 0}, duration_ms=500)

    command = {"command": "make test", "timeout": 300}
    steps = [ToolStep(index=n, tool="shell_exec", input=command) for n in range(3)]
    done = ResultStep(index=3, mode="template", template="Built and tested")
    executor = hand_built_executor("t", [*steps, done])
    scope = offline_scope()
    scope = dataclasses.replace(scope, ports=dataclasses.replace(scope.ports, exec_tool=exec_tool))

    async def main() -> ReplayResult:
        deadline = anyio.current_time() + 3.0
        replayer = Replayer(executor, scope, max_tool_timeout_s=3.0, deadline=deadline)
        return await replayer.run()

    assert anyio.run(main).ok and len(sent) == 3
    # Asked at the start, after 0.5 s and after 1 s of the run's 3 s.
    for n, request in enumerate(sent):
        assert 0 < request.timeout_s <= 3.0 - 0.5 * n


@pytest.mark.parametrize(
    ("then", "quality_check"),
    [
        (ToolStep(index=1, tool="shell_exec", input={"command": "./deploy.sh"}), False),
        (LlmStep(index=1, prompt="Which release?"), False),
        (ResultStep(index=1, mode="llm", prompt="Write it", example="Deployed"), False),
        (ResultStep(index=1, mode="template", template="Deployed", example="Deployed"), True),
    ],
    ids=["tool", "small_model", "llm_result", "quality_check"],
)
def test_no_replay_call_starts_once_the_runs_deadline_has_passed(
    then: object, quality_check: bool
) -> None:
    """A step's reply that came back after the deadline (before the caller's cancel
    did) is the replay's end: no next tool call acts, no model call is paid for."""
    tools: list[str] = []
    asked: list[CompleteRequest] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        tools.append(request.input["command"])
        await anyio.sleep(0.3)  # the reply comes back after the deadline
        return ToolResult(ok=True, output={"exit_code": 0}, duration_ms=300)

    async def complete(request: CompleteRequest) -> CompleteReply:
        asked.append(request)
        return small_model_reply("Deployed")

    steps = [ToolStep(index=0, tool="shell_exec", input={"command": "make"}), then]
    if not isinstance(then, ResultStep):
        steps.append(ResultStep(index=2, mode="template", template="Deployed"))
    executor = hand_built_executor("t", steps)  # type: ignore[arg-type]
    scope = offline_scope()
    spec = TaskSpec(name="t", prompt="p", quality_check=quality_check)
    ports = dataclasses.replace(scope.ports, exec_tool=exec_tool, complete=complete)
    scope = dataclasses.replace(scope, spec=spec, ports=ports)

    async def main() -> ReplayResult:
        deadline = anyio.current_time() + 0.1
        return await Replayer(executor, scope, retries=1, backoff_s=0.0, deadline=deadline).run()

    result = anyio.run(main)
    assert not result.ok and result.out_of_time and result.failed_step == 1
    assert result.reason == "the run passed its deadline"
    assert not result.infrastructure
    assert tools == ["make"] and asked == []


# --- the quality check -----------------------------------------------------------------


def _replay_checked(replies: list[object], retries: int = 2) -> tuple[ReplayResult, int]:
    """A template answer judged by the quality check (TaskSpec.quality_check); each check
    call takes the next of `replies` (a PortError is raised). Returns the result and
    how many times the check was asked."""
    asked: list[str] = []

    async def complete(request: CompleteRequest) -> CompleteReply:
        asked.append(request.purpose)
        reply = replies[min(len(asked), len(replies)) - 1]
        if isinstance(reply, PortError):
            raise reply
        return small_model_reply(str(reply))

    step = ResultStep(index=0, mode="template", template="3 new items", example="5 new items")
    scope = offline_scope()
    spec = TaskSpec(name="t", prompt="Count the new items", quality_check=True)
    scope = dataclasses.replace(
        scope, spec=spec, ports=dataclasses.replace(scope.ports, complete=complete)
    )
    executor = hand_built_executor("t", [step])
    result = anyio.run(Replayer(executor, scope, retries=retries, backoff_s=0.0).run)
    assert set(asked) == {"quality_check"}
    return result, len(asked)


@pytest.mark.parametrize("code", ["overloaded", "rate_limited", "upstream", "timeout"])
def test_a_quality_check_the_llm_service_could_not_serve_once_is_tried_again(code: str) -> None:
    """A one-off failure of the check's model call says nothing about the answer: like a
    model step, it is retried rather than paying for a full run."""
    result, asked = _replay_checked([PortError(code, "try later"), "PASS: same form"])
    assert result.ok, result.reason
    assert result.answer == "3 new items" and asked == 2


def test_a_quality_check_the_llm_service_never_serves_is_not_the_executors_failure() -> None:
    result, asked = _replay_checked([PortError("overloaded", "try later")], retries=2)
    assert not result.ok and result.failed_step == 0
    assert result.infrastructure and asked == 3


def test_a_quality_check_refused_by_the_llm_service_is_not_retried() -> None:
    result, asked = _replay_checked([PortError("invalid_request", "bad model")])
    assert not result.ok and not result.infrastructure and asked == 1


@pytest.mark.parametrize(
    "said", ["FAIL: the items are placeholders", "It looks fine to me", "PASS: so FAIL"]
)
def test_a_quality_checks_failing_verdict_is_not_asked_again(said: str) -> None:
    """The model's verdict is the check's answer: asking until it says PASS would
    defeat the check."""
    result, asked = _replay_checked([said, "PASS: same form"])
    assert not result.ok and not result.infrastructure
    assert (result.reason or "").startswith("quality check:") and asked == 1
