"""The runner's pure rules: stuck detection, transcript bounds, run state folding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.errors import ErrorInfo
from contracts.llm import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from contracts.runs import ModelTokens, RunEvent
from contracts.tools import ToolResult
from services.runner.agent_loop import tool_result_text
from services.runner.run_view import fold
from services.runner.stuck import StuckDetector
from services.runner.transcript import MAX_STRING, TranscriptRecorder


def test_three_identical_failures_in_a_row_are_stuck() -> None:
    stuck = StuckDetector()
    args = ("browser_click", {"text": "Next"}, "not_found: no element")
    assert not stuck.observe(*args)
    assert not stuck.observe(*args)
    assert stuck.observe(*args)


def test_a_success_or_a_different_error_resets_the_count() -> None:
    stuck = StuckDetector()
    call = ("browser_click", {"text": "Next"})
    stuck.observe(*call, "e1")
    stuck.observe(*call, "e1")
    stuck.observe(*call, None)  # success in between
    stuck.observe(*call, "e1")
    assert not stuck.observe(*call, "e1")
    assert not stuck.observe(*call, "e2")  # different error
    assert not stuck.observe("browser_click", {"text": "Other"}, "e2")  # different input
    assert not stuck.observe("browser_click", {"text": "Other"}, "e2")
    assert stuck.observe("browser_click", {"text": "Other"}, "e2")


def test_transcript_bounds_long_strings_but_keeps_signatures() -> None:
    recorder = TranscriptRecorder("run_1", "t")
    long = "x" * (MAX_STRING + 50)
    recorder.message(
        Message(
            role="assistant",
            content=[
                ThinkingBlock(thinking="", signature="sig=="),
                TextBlock(text=long),
                ToolUseBlock(id="u1", name="browser_read_page", input={}),
            ],
        )
    )
    recorder.message(
        Message(role="user", content=[ToolResultBlock(tool_use_id="u1", content=long)])
    )
    transcript = recorder.build()
    assert transcript.truncated
    first = transcript.entries[0].message
    assert first is not None and isinstance(first.content, list)
    assert first.content[0] == ThinkingBlock(thinking="", signature="sig==")
    assert isinstance(first.content[1], TextBlock)
    assert len(first.content[1].text) < len(long)
    assert "50 more characters" in first.content[1].text


def test_tool_results_read_back_as_text() -> None:
    ok = ToolResult(ok=True, output=["a", "b"], duration_ms=3)
    assert tool_result_text(ok) == '["a", "b"]'
    cut = ToolResult(ok=True, output="page", truncated=True, duration_ms=3)
    assert tool_result_text(cut).endswith("[output truncated]")
    bad = ToolResult(
        ok=False, duration_ms=1, error=ErrorInfo(code="timeout", message="took too long")
    )
    assert tool_result_text(bad) == "timeout: took too long"


def test_run_view_folds_lifecycle_in_any_order() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    common = {"task_id": "t", "run_id": "r"}
    events = [
        RunEvent(
            **common, event="completed", at=t0 + timedelta(seconds=9), status="completed",
            source="full_llm", result="do", result_truncated=True, result_ref="sha256:ab",
            cost_usd=0.5, duration_ms=9000,
            tokens={"claude-sonnet-5-5": ModelTokens(input_tokens=10, output_tokens=2)},
        ),
        RunEvent(**common, event="requested", at=t0, status="requested", origin="schedule"),
        RunEvent(**common, event="started", at=t0 + timedelta(seconds=1), status="running"),
    ]  # fmt: skip
    view = fold(events)
    assert view is not None
    assert view.status == "completed" and view.result == "do" and view.cost_usd == 0.5
    assert (view.result_truncated, view.result_ref) == (True, "sha256:ab")  # as the event says
    assert view.requested_at == t0 and view.finished_at == t0 + timedelta(seconds=9)
    assert view.origin == "schedule"  # who asked for it, though only `requested` says
    assert fold([]) is None


def test_a_long_transcript_fits_one_message_keeping_both_ends() -> None:
    from contracts.runs import Transcript
    from services.kernel.codec import decode

    recorder = TranscriptRecorder("run_1", "t")
    recorder.message(Message(role="user", content="the task"))
    for i in range(300):
        recorder.replay_step(i, {"output": "y" * 5000})
    recorder.note("the end")
    data = recorder.encoded(max_bytes=100_000)
    assert len(data) <= 100_000
    transcript = decode(data, Transcript)
    assert transcript.truncated
    first, last = transcript.entries[0], transcript.entries[-1]
    assert first.message is not None and first.message.content == "the task"
    assert last.detail == {"text": "the end"}
    assert any("left out" in str(e.detail) for e in transcript.entries)


def test_a_replay_cut_off_by_the_deadline_is_a_failed_replay_whose_cost_counts() -> None:
    from contracts.executors import LlmStep, ResultStep
    from contracts.llm import CompleteReply, Usage
    from services.runner.accounting import Ledger
    from services.runner.attempt import AttemptState
    from services.runner.replay import Replayer
    from tests.hand_built_replay import hand_built_executor, offline_scope

    steps = [LlmStep(index=0, prompt="judge"), ResultStep(index=1, mode="template")]
    executor = hand_built_executor("t", steps, version=4)
    replayer = Replayer(executor, offline_scope())
    # One small-model step was answered (and billed) before the deadline struck.
    replayer.current_step = 1
    replayer.ledger.add(
        CompleteReply(
            id="m1",
            model="claude-haiku-5-5",
            content=[],
            stop_reason="end_turn",
            usage=Usage(input_tokens=100, output_tokens=10),
            cost_usd=0.00002,
        )
    )
    attempt = AttemptState(version=4, replayer=replayer)
    run_ledger = Ledger()
    attempt.cut_off_replay(run_ledger, "the run passed its 3 s deadline")

    assert run_ledger.cost_usd == 0.00002  # the run's cost includes what the replay spent
    assert attempt.source == "executor"
    replay = attempt.replay
    assert replay is not None and not replay.ok and replay.version == 4 and replay.step == 1
    assert replay.cost_usd == 0.00002 and replay.tokens["claude-haiku-5-5"].calls == 1
    # Once the replay's outcome is known (it finished, then path B ran), nothing changes.
    attempt.cut_off_replay(run_ledger, "again")
    assert run_ledger.cost_usd == 0.00002 and replay.reason == "the run passed its 3 s deadline"


def test_an_abandoned_runs_error_never_carries_part_of_a_secret() -> None:
    from services.kernel.secrets import register_secret
    from services.runner.bounds import MAX_ABANDON_ERROR_CHARS, abandon_error

    secret = "hunter2-db-password-XYZ"
    register_secret(secret)
    # The secret straddles the cut: cutting first would leave "hunter2-db-pa" readable.
    prefix = "x" * (MAX_ABANDON_ERROR_CHARS - len("RuntimeError: ") - 10)
    error = abandon_error(RuntimeError(prefix + secret + " and more"))
    assert len(error) <= MAX_ABANDON_ERROR_CHARS
    assert "hunter2" not in error
