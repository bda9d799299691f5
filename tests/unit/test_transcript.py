"""A run's transcript as people read it: every entry masked and bounded (notes too), and
a long run keeps both ends — how it began, and how it ended."""

from __future__ import annotations

import threading

from contracts.llm import Message, TextBlock, ToolResultBlock, ToolUseBlock
from contracts.runs import Transcript
from services.kernel.codec import decode
from services.kernel.secrets import register_secret
from services.runner.transcript import MAX_BYTES, MAX_ENTRIES, MAX_STRING, TranscriptRecorder


def test_a_note_masks_secrets_in_its_text_and_detail_and_is_bounded() -> None:
    key = "rk-live-0123456789abcdef-notes"
    register_secret(key)
    recorder = TranscriptRecorder("r", "t")
    recorder.note(
        "llm_error: upstream: 401 for https://bot:hunter2-pw@api.example.com/v1 with key " + key,
        reason="llm_error",
        url="https://bot:hunter2-pw@api.example.com/v1",
    )
    recorder.note("stuck: " + "e" * (MAX_STRING + 100), reason="stuck")
    transcript = recorder.build()
    masked, long = transcript.entries
    written = str(masked.detail)
    assert "hunter2-pw" not in written and key not in written
    assert masked.detail is not None and masked.detail["reason"] == "llm_error"
    assert masked.detail["text"].startswith("llm_error: upstream: 401 for https://bot:")
    assert long.detail is not None and len(long.detail["text"]) < MAX_STRING + 100
    assert "more characters" in long.detail["text"] and transcript.truncated


def test_a_secret_across_the_cut_of_a_long_string_is_still_masked() -> None:
    key = "rk-live-fedcba9876543210-cut"
    register_secret(key)
    recorder = TranscriptRecorder("r", "t")
    # The key starts 10 characters before the cut: cutting first would leave
    # "rk-live-fe" readable and no longer recognisable as the key.
    text = "x" * (MAX_STRING - 10) + key + " and more"
    recorder.message(Message(role="user", content=[ToolResultBlock(tool_use_id="u", content=text)]))
    recorder.note(text)
    written = str(recorder.build().entries)
    assert "rk-live-fe" not in written


def test_a_long_run_keeps_its_beginning_its_answer_and_its_failure_note() -> None:
    recorder = TranscriptRecorder("r", "t")
    recorder.message(Message(role="user", content="Read every page"))
    turns = 1000
    for n in range(turns):
        recorder.message(
            Message(
                role="assistant",
                content=[ToolUseBlock(id=f"u{n}", name="browser_read_page", input={})],
            )
        )
        recorder.message(
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"u{n}", content="page")])
        )
    recorder.message(Message(role="assistant", content=[TextBlock(text="The final answer")]))
    recorder.note("the answer failed its quality check", reason="quality")

    transcript = decode(recorder.encoded(), Transcript)
    entries = transcript.entries
    total = 1 + 2 * turns + 2
    assert transcript.truncated and len(entries) <= MAX_ENTRIES
    # How it began...
    first = entries[0].message
    assert first is not None and first.content == "Read every page"
    # ...how it ended: the answer, then the failure note, as the last two entries.
    answer = entries[-2].message
    assert answer is not None and answer.content == [TextBlock(text="The final answer")]
    assert entries[-1].detail == {
        "text": "the answer failed its quality check",
        "reason": "quality",
    }
    # ...and what went in between is counted, not silently lost.
    markers = [e for e in entries if e.kind == "note" and "left out" in str(e.detail)]
    assert len(markers) == 1
    assert f"{total - (len(entries) - 1)} entries left out" in str(markers[0].detail)


def test_a_short_run_is_kept_whole() -> None:
    recorder = TranscriptRecorder("r", "t")
    recorder.message(Message(role="user", content="task"))
    recorder.note("done")
    transcript = recorder.build()
    assert not transcript.truncated and len(transcript.entries) == 2


def test_entries_too_large_to_keep_together_are_left_out_and_counted() -> None:
    # A replay step's structured output is bounded per string, not per item: outputs
    # near the tool's cap do not fit one message together, and one alone may not either.
    recorder = TranscriptRecorder("r", "t")
    recorder.message(Message(role="user", content="task"))
    for step, items in enumerate([4_000, 4_000, 11_000, 4_000, 4_000]):
        recorder.replay_step(step, {"tool": "browser_extract", "output": ["x" * 50] * items})
    recorder.note("done")
    found: list[bytes] = []
    # In a thread, so a regression (it once looped forever here) fails instead of hanging.
    worker = threading.Thread(target=lambda: found.append(recorder.encoded()), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert found, "encoding the transcript did not finish"
    assert len(found[0]) <= MAX_BYTES
    entries = decode(found[0], Transcript).entries
    first = entries[0].message
    assert first is not None and first.content == "task"
    assert entries[-1].detail == {"text": "done"}
    kept = [e for e in entries if e.kind == "replay_step"]
    assert len(kept) >= 2 and all(len((e.detail or {})["output"]) == 4_000 for e in kept)
    assert any(e.kind == "note" and "left out" in str(e.detail) for e in entries)


def test_an_entry_too_large_for_any_message_becomes_a_note_of_its_size() -> None:
    recorder = TranscriptRecorder("r", "t")
    recorder.replay_step(0, {"tool": "browser_extract", "output": ["x" * 50] * 20_000})
    recorder.note("done")
    entries = decode(recorder.encoded(), Transcript).entries
    assert entries[0].kind == "note" and entries[0].step == 0
    assert "a replay_step entry (step 0) of" in str(entries[0].detail)
    assert entries[-1].detail == {"text": "done"}


def test_a_tool_result_keeps_its_links_for_the_model_but_not_in_the_transcript() -> None:
    # Tool replies keep credential query parameters (the model follows those links);
    # the transcript is kept and read by people: it masks them.
    link = "https://mail.test/reset?token=Reset-7731-tok&u=ada"
    recorder = TranscriptRecorder("r", "t")
    result = ToolResultBlock(tool_use_id="toolu_1", content=f'["{link}"]')
    recorder.message(Message(role="user", content=[result]))
    written = str(recorder.build().entries[0])
    assert "Reset-7731-tok" not in written and "token=[redacted]&u=ada" in written
