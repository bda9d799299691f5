"""Run state read back from the bus: lifecycle events in ROTE_RUNS, transcripts in a
key-value bucket. Nothing is held in one process's memory, so any runner (or the tracer)
can answer for any run."""

from __future__ import annotations

import msgspec
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.runs import RunEvent, Transcript
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.logs import get_logger
from services.kernel.secrets import redact
from services.kernel.text import cut_text

log = get_logger("rote.runs")

TERMINAL = ("completed", "failed")


def read_run_event(subject: str, data: bytes) -> RunEvent | None:
    """A stored run event, or None (logged) when it is not one rote wrote (a
    hand-published test message, another version's): the run's other events still
    answer for it."""
    try:
        return decode(data, RunEvent)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        error = cut_text(redact(str(exc)), 300, mark="")
        log.warning("run_event_unreadable", subject=subject, error=error)
        return None


class TranscriptUnreadable(Exception):
    """What is stored as a run's transcript does not decode as one."""


class RunStore:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._transcripts: KeyValue | None = None

    async def _kv(self) -> KeyValue:
        # Looking a bucket up is an API round trip: do it once.
        if self._transcripts is None:
            self._transcripts = await self.bus.js.key_value(s.BUCKET_TRANSCRIPTS)
        return self._transcripts

    async def last_event(self, run_id: str, event: str = "*") -> RunEvent | None:
        try:
            msg = await self.bus.js.get_last_msg(
                s.STREAM_RUNS, s.run_events_of(run_id=run_id, event=event)
            )
        except NotFoundError:
            return None
        return read_run_event(msg.subject or "", msg.data or b"")

    async def events(self, run_id: str) -> list[RunEvent]:
        found = []
        for name in ("requested", "started", "replay_failed", "completed", "failed"):
            event = await self.last_event(run_id, name)
            if event is not None:
                found.append(event)
        return found

    async def finished(self, run_id: str, *, thorough: bool = False) -> RunEvent | None:
        """The run's terminal event, if it has one. Usually that is the run's last
        event, and one look answers. But a runner that went on after the scheduler
        abandoned the run (its deadline long past) may have published `started` or
        `replay_failed` after the terminal event: then the terminal subjects are asked.
        `thorough` asks them after a last `requested` too: a request republished past
        the stream's duplicate window (an outbox relay that crashed before saving its
        position) can follow the run's end."""
        event = await self.last_event(run_id)
        if event is None or event.event in TERMINAL:
            return event
        if event.event == "requested" and not thorough:
            return None
        for name in TERMINAL:
            found = await self.last_event(run_id, name)
            if found is not None:
                return found
        return None

    async def save_transcript(self, data: bytes, run_id: str) -> None:
        """`data`: an encoded Transcript, already bounded to fit one message."""
        await (await self._kv()).put(run_id, data)

    async def stored_transcript(self, run_id: str) -> Transcript | None:
        """The run's transcript, None when there is none; TranscriptUnreadable when
        what is stored is not one rote wrote (a hand-put value, another version's)."""
        try:
            entry = await (await self._kv()).get(run_id)
        except (KeyNotFoundError, NotFoundError):
            return None
        try:
            return decode(entry.value or b"", Transcript)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("transcript_unreadable", run_id=run_id, error=redact(str(exc))[:300])
            raise TranscriptUnreadable(run_id) from None

    async def transcript(self, run_id: str) -> Transcript | None:
        """As stored_transcript, an unreadable one as if there were none, rather than
        failing every reader of it (the tracer retrying, then dropping the run's trace)
        on what asking again cannot change."""
        try:
            return await self.stored_transcript(run_id)
        except TranscriptUnreadable:
            return None
