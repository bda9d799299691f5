"""The runner's NATS side of the `Ports` seam: how a run reaches the llm, tools and
compiler services over the bus.

`bus_ports` builds the `Ports` the replay and the agent loop call (model calls re-sent
across a NATS reconnect, tool calls pinned to one tools process by `ToolsClient`, text
events masked); `ExecutorCache` answers "which executor does this task replay?" without
asking the compiler on every run.
"""

from __future__ import annotations

import time
import zlib

import msgspec
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.effects import FINISHED_KEY, Effect
from contracts.executors import ActiveExecutor, ExecutorRef
from contracts.llm import CompleteReply, CompleteRequest, TextEvent, ToolDefinition, Usage
from contracts.runs import RunEvent
from contracts.tools import CallStatus, CallStatusQuery, ExecTool, ListTools, ToolList, ToolResult
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode, encode
from services.kernel.errors import RemoteError
from services.kernel.logs import get_logger
from services.kernel.replay_read import read_all
from services.kernel.secrets import redact
from services.kernel.tools_client import ToolsClient
from services.runner.ports import PortError, Ports, named_call

log = get_logger("rote.runner")

LLM_TIMEOUT_S = 300.0
# Re-sends of a model call when NATS reconnected while it waited (its reply may have
# been lost; the llm service answers a repeat from its record), all within
# LLM_TIMEOUT_S. A slow call is not re-sent: it looks just like a lost one, and a
# re-send another llm process took would pay for it twice.
LLM_RESENDS = 3
# How long asking the tools service what became of an action's call may take (NATS
# may be coming back from an outage: the request waits for it).
CALL_STATUS_TIMEOUT_S = 30.0


class ExecutorCache:
    """Each task's active executor, as the compiler last said, kept until an executor
    event for that task (compiled, superseded, invalidated, a replay or a full run
    recorded...) or `ttl_s` passes. Every run asks for its executor; without this each
    would wait on the compiler, which then caps how many runs a second the whole system
    does."""

    def __init__(self, bus: Bus, ttl_s: float = 30.0) -> None:
        self.bus = bus
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, ActiveExecutor]] = {}
        # Bumped by every event of a task: a lookup answered while an event arrived
        # may already be out of date, so it is not kept.
        self._generation: dict[str, int] = {}
        self._subscribed = False

    async def start(self) -> None:
        async def forget(msg: Msg) -> None:
            parts = msg.subject.split(".")  # rote.evt.executor.<task_id>.<event>
            if len(parts) == 5:
                self._entries.pop(parts[3], None)
                self._generation[parts[3]] = self._generation.get(parts[3], 0) + 1

        await self.bus.nc.subscribe(s.EXECUTOR_EVENTS_ALL, cb=forget)
        # In place before the runner says it started, so an invalidation published
        # right after that is not missed by a cached lookup.
        try:
            await routed(self.bus.nc)
        except TimeoutError:  # NATS away right now: the subscription still comes into force
            log.warning("executor_cache_subscribe_unconfirmed")
        self._subscribed = True

    async def get(self, task_id: str) -> ActiveExecutor | None:
        now = time.monotonic()
        cached = self._entries.get(task_id)
        if self._subscribed and cached is not None and cached[0] > now:
            return cached[1]
        generation = self._generation.get(task_id, 0)
        try:
            active = await self.bus.request(
                s.EXECUTORS_ACTIVE, ExecutorRef(task_id=task_id), ActiveExecutor, timeout=10
            )
        except RemoteError as exc:
            # No compiler, or it cannot answer: run the full loop rather than not at all.
            log.warning("executor_lookup_failed", code=exc.code, error=exc.message)
            return None
        if self._generation.get(task_id, 0) == generation:
            self._entries[task_id] = (now + self.ttl_s, active)
        return active


def billed_reply(exc: RemoteError) -> CompleteReply | None:
    """What a failed model call cost, when the llm service says the API billed it."""
    details = exc.info.details or {}
    if "cost_usd" not in details or "usage" not in details:
        return None
    try:
        return CompleteReply(
            id="billed-error",
            model=str(details.get("model") or "unknown"),
            content=[],
            stop_reason=None,
            usage=msgspec.convert(details["usage"], Usage),
            cost_usd=float(details["cost_usd"]),
        )
    except (msgspec.ValidationError, TypeError, ValueError):
        return None


def bus_ports(bus: Bus, executors: ExecutorCache | None = None) -> Ports:
    """The runner's view of the llm, tools and compiler services, over NATS."""
    executors = executors or ExecutorCache(bus, ttl_s=0.0)
    tools = ToolsClient(bus)

    async def complete(request: CompleteRequest) -> CompleteReply:
        try:
            return await bus.request(
                s.LLM_COMPLETE,
                named_call(request),
                CompleteReply,
                timeout=LLM_TIMEOUT_S,
                resend=LLM_RESENDS,
            )
        except RemoteError as exc:
            raise PortError(exc.code, exc.message, billed=billed_reply(exc)) from None

    async def exec_tool(request: ExecTool) -> ToolResult:
        try:
            # Room past the call's own time for a repeat that waits on the first call
            # under its key, which may run until its record's `until` (tools README).
            return await tools.call(request, timeout=request.timeout_s + 20)
        except RemoteError as exc:
            raise PortError(exc.code, exc.message) from None

    async def close_session(run_id: str, attempt: int) -> None:
        await tools.close(run_id, attempt)

    async def call_status(query: CallStatusQuery) -> CallStatus:
        try:
            return await tools.call_status(query, timeout=CALL_STATUS_TIMEOUT_S)
        except RemoteError as exc:
            raise PortError(exc.code, exc.message) from None

    async def list_tools(names: list[str]) -> list[ToolDefinition]:
        try:
            return (await bus.request(s.TOOLS_LIST, ListTools(names=names), ToolList)).tools
        except RemoteError as exc:
            raise PortError(exc.code, exc.message) from None

    async def publish_text(event: TextEvent) -> None:
        event.text = redact(event.text)
        await bus.publish_event(
            s.llm_event(event.run_id, "text"),
            event,
            msg_id=(
                f"{event.run_id}:text:{event.attempt}:{event.turn}:"
                f"{zlib.crc32(event.text.encode()):08x}"
            ),
        )

    return Ports(
        complete=complete,
        exec_tool=exec_tool,
        list_tools=list_tools,
        publish_text=publish_text,
        active_executor=executors.get,
        close_session=close_session,
        max_payload=bus.nc.max_payload,
        call_status=call_status,
    )


class KvEffects:
    """The runs' effect journals in the JetStream key-value bucket `rote_effects`
    (replicated like rote's other buckets): any runner reads a run's journal."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.js.key_value(s.BUCKET_EFFECTS)
        return self._kv

    async def load(self, run_id: str) -> tuple[dict[str, Effect], RunEvent | None]:
        await self._bucket()
        msgs = await read_all(
            self.bus.js, f"KV_{s.BUCKET_EFFECTS}", f"$KV.{s.BUCKET_EFFECTS}.{run_id}.>"
        )
        effects: dict[str, Effect] = {}
        finished: RunEvent | None = None
        for msg in msgs:
            if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
                continue
            key = msg.subject.rsplit(".", 1)[-1]
            if key == FINISHED_KEY:
                finished = decode(msg.data, RunEvent)
            else:
                effects[key] = decode(msg.data, Effect)
        return effects, finished

    async def put(self, effect: Effect) -> None:
        await (await self._bucket()).put(f"{effect.run_id}.{effect.key}", encode(effect))

    async def put_finished(self, event: RunEvent) -> None:
        await (await self._bucket()).put(f"{event.run_id}.{FINISHED_KEY}", encode(event))
