"""Run state read back from the bus: lifecycle events in ROTE_RUNS, transcripts in an
object store. Nothing is held in one process's memory, so any runner (or the tracer)
can answer for any run."""

from __future__ import annotations

from nats.js.errors import NotFoundError, ObjectNotFoundError

from contracts import subjects as s
from contracts.runs import RunEvent, Transcript
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode

TERMINAL = ("completed", "failed")


class RunStore:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def last_event(self, run_id: str, event: str = "*") -> RunEvent | None:
        try:
            msg = await self.bus.js.get_last_msg(
                s.STREAM_RUNS, s.run_events_of(run_id=run_id, event=event)
            )
        except NotFoundError:
            return None
        return decode(msg.data or b"", RunEvent)

    async def events(self, run_id: str) -> list[RunEvent]:
        found = []
        for name in ("requested", "started", "replay_failed", "completed", "failed"):
            event = await self.last_event(run_id, name)
            if event is not None:
                found.append(event)
        return found

    async def finished(self, run_id: str) -> RunEvent | None:
        for name in TERMINAL:
            event = await self.last_event(run_id, name)
            if event is not None:
                return event
        return None

    async def save_transcript(self, transcript: Transcript) -> None:
        store = await self.bus.js.object_store(s.BUCKET_TRANSCRIPTS)
        await store.put(transcript.run_id, encode(transcript))

    async def transcript(self, run_id: str) -> Transcript | None:
        store = await self.bus.js.object_store(s.BUCKET_TRANSCRIPTS)
        try:
            result = await store.get(run_id)
        except (ObjectNotFoundError, NotFoundError):
            return None
        return decode(result.data or b"", Transcript)
