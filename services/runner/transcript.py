"""The human-readable record of a run: every message exchanged with the model and
every replayed step, with long strings bounded. The conversation sent to the model is
kept separately and verbatim; this is a copy for people and for the tracer."""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Any

import msgspec

from contracts.base import utc_now
from contracts.llm import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from contracts.runs import Transcript, TranscriptEntry
from services.kernel.codec import encode
from services.kernel.secrets import redact
from services.kernel.text import ELLIPSIS

MAX_STRING = 8_000
MAX_ENTRIES = 400
# A transcript is stored as one NATS message (default max payload 1 MB).
MAX_BYTES = 900_000


def _bound(text: str) -> tuple[str, bool]:
    """Bounded and with secrets masked: a transcript is kept, and read by people. Masked
    before it is cut: a secret cut in half would no longer be recognised as one."""
    text = redact(text)
    if len(text) <= MAX_STRING:
        return text, False
    # Not kernel.text.cut_text, which fits a text and its mark within a limit: a string
    # here keeps its first MAX_STRING characters whatever the mark adds after them.
    return text[:MAX_STRING] + f"{ELLIPSIS}[{len(text) - MAX_STRING} more characters]", True


def _bound_value(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        return _bound(value)
    if isinstance(value, dict):
        out, cut = {}, False
        for k, v in value.items():
            out[k], c = _bound_value(v)
            cut |= c
        return out, cut
    if isinstance(value, list):
        items, cut = [], False
        for v in value:
            item, c = _bound_value(v)
            items.append(item)
            cut |= c
        return items, cut
    return value, False


def bounded_message(message: Message) -> tuple[Message, bool]:
    if isinstance(message.content, str):
        text, cut = _bound(message.content)
        return Message(role=message.role, content=text), cut
    blocks: list[Any] = []
    cut = False
    for block in message.content:
        match block:
            case TextBlock(text=text):
                bounded, c = _bound(text)
                blocks.append(TextBlock(text=bounded))
            case ThinkingBlock(thinking=thinking, signature=signature):
                # The record may mask text inside it; the conversation sent back to the
                # model keeps every block verbatim (this is a copy).
                bounded, c = _bound(thinking)
                blocks.append(ThinkingBlock(thinking=bounded, signature=signature))
            case ToolUseBlock():
                value, c = _bound_value(block.input)
                blocks.append(msgspec.structs.replace(block, input=value))
            case ToolResultBlock():
                value, c = _bound_value(block.content)
                blocks.append(msgspec.structs.replace(block, content=value))
            case _:
                blocks.append(block)
                c = False
        cut |= c
    return Message(role=message.role, content=blocks), cut


class TranscriptRecorder:
    """Keeps both ends of a long run: the first entries (what was asked, how it began)
    and the latest ones (how it ended: the answer, the failure note), with a note of how
    many were left out between them."""

    def __init__(self, run_id: str, task_id: str, max_entries: int = MAX_ENTRIES) -> None:
        self.run_id = run_id
        self.task_id = task_id
        self.truncated = False
        self._head: list[TranscriptEntry] = []
        # One place is kept for the note that says how many were left out.
        self._head_size = max_entries // 2
        self._tail: deque[TranscriptEntry] = deque(maxlen=max(1, max_entries - self._head_size - 1))
        self._dropped = 0
        self._dropped_at: datetime | None = None

    @property
    def entries(self) -> list[TranscriptEntry]:
        if not self._dropped:
            return [*self._head, *self._tail]
        marker = TranscriptEntry(
            at=self._dropped_at or self._tail[0].at,
            kind="note",
            detail={"text": f"{self._dropped} entries left out to keep the transcript bounded"},
        )
        return [*self._head, marker, *self._tail]

    def _add(self, entry: TranscriptEntry) -> None:
        if len(self._head) < self._head_size:
            self._head.append(entry)
            return
        if len(self._tail) == self._tail.maxlen:
            self.truncated = True
            self._dropped += 1
            if self._dropped_at is None:
                self._dropped_at = self._tail[0].at
        self._tail.append(entry)

    def message(self, message: Message, at: datetime | None = None) -> None:
        bounded, cut = bounded_message(message)
        self.truncated |= cut
        self._add(TranscriptEntry(at=at or utc_now(), kind="message", message=bounded))

    def replay_step(self, step: int, detail: dict[str, Any], at: datetime | None = None) -> None:
        value, cut = _bound_value(detail)
        self.truncated |= cut
        self._add(TranscriptEntry(at=at or utc_now(), kind="replay_step", step=step, detail=value))

    def note(self, text: str, at: datetime | None = None, **detail: Any) -> None:
        # Notes carry error texts (a URL with its password, an API key echoed back):
        # bounded and masked like every other entry.
        value, cut = _bound_value({"text": text, **detail})
        self.truncated |= cut
        self._add(TranscriptEntry(at=at or utc_now(), kind="note", detail=value))

    def carry_over(self, earlier: Transcript) -> None:
        """Start from an earlier attempt's stored record (its entries already bounded
        and masked when they were recorded)."""
        self.truncated |= earlier.truncated
        for entry in earlier.entries:
            self._add(entry)

    def build(self) -> Transcript:
        return Transcript(
            run_id=self.run_id,
            task_id=self.task_id,
            entries=self.entries,
            truncated=self.truncated,
        )

    def encoded(self, max_bytes: int = MAX_BYTES) -> bytes:
        """The transcript as one message of at most `max_bytes`: when it is longer, the
        middle goes (the beginning says what was asked, the end how it ended), and an
        entry too large to keep beside the others is replaced by a note of its size."""
        transcript = self.build()
        data = encode(transcript)
        if len(data) <= max_bytes:
            return data
        entries = [_fitting(entry, max_bytes // 4) for entry in transcript.entries]
        budget = max_bytes - len(encode(msgspec.structs.replace(transcript, entries=[])))
        budget -= _MARKER_BYTES
        # Whole entries from both ends in turn, while they fit; the first and the last
        # always do (each is at most a quarter of the message).
        head: list[TranscriptEntry] = []
        tail: list[TranscriptEntry] = []
        lo, hi = 0, len(entries) - 1
        while lo <= hi:
            from_head = len(head) <= len(tail)
            entry = entries[lo] if from_head else entries[hi]
            size = len(encode(entry)) + 1  # and its comma
            if size > budget:
                break
            budget -= size
            if from_head:
                head.append(entry)
                lo += 1
            else:
                tail.append(entry)
                hi -= 1
        kept = head
        if lo <= hi:
            dropped = hi - lo + 1
            text = f"{dropped} entries left out to fit one message"
            kept = [*head, TranscriptEntry(at=entries[lo].at, kind="note", detail={"text": text})]
        kept += reversed(tail)
        return encode(msgspec.structs.replace(transcript, entries=kept, truncated=True))


# Room for the note saying how many entries were left out.
_MARKER_BYTES = 200


def _fitting(entry: TranscriptEntry, max_bytes: int) -> TranscriptEntry:
    """The entry, or a note in its place when it alone encodes to more than `max_bytes`
    (a replay step's large structured output: its strings are bounded, not its items)."""
    size = len(encode(entry))
    if size <= max_bytes:
        return entry
    what = f"a {entry.kind} entry" + (f" (step {entry.step})" if entry.step is not None else "")
    text = f"{what} of {size} bytes left out to fit one message"
    return TranscriptEntry(at=entry.at, kind="note", step=entry.step, detail={"text": text})
