"""A run's effect journal, as one delivery of the run uses it: every action (a tool whose
kind says it acts: a click, a submit, a write, a command) is recorded before it runs
and settled after, so no redelivery, restart or fallback does it twice.

- Before an action runs, its intent is put in the journal under its key (a replay's
  `x<version>-<step>`, stable across deliveries; a full run's `b<attempt>-<call>`), and the call
  goes to the tools service under an idempotency key of its own (`<key>~<attempt>~<n>`),
  which the tools service runs at most once. After it, its outcome is put beside it.
- A later delivery reads the journal first. An action recorded done is not run again:
  a replay's step gets its recorded result; a full run's call with the same tool and
  the same input is answered from the journal (each recorded action answers one call).
- An action whose intent is recorded and whose outcome is not is settled by asking the
  tools service what became of its call (`call_status`, which also closes the key so a
  request still on its way can never run later): it finished (its result is the
  outcome), it never ran (it may run again), or nobody can tell. Then it is in doubt:
  the run stops with `needs_attention` rather than guess (`ActionInDoubt`).

The store is a port (`EffectStore`): a JetStream key-value bucket in the service
(adapters.py), a dict in `MemoryEffects` for tests and offline tools.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

import anyio
import msgspec

from contracts.base import utc_now
from contracts.effects import Effect
from contracts.runs import RunEvent
from contracts.tools import CallStatus, CallStatusQuery, ExecTool, ToolMetadata, ToolResult
from services.executor.toolkinds import DID_NOT_ACT, acts
from services.kernel.codec import encode
from services.kernel.logs import get_logger
from services.kernel.secrets import redact_value
from services.kernel.text import cut_text
from services.runner.ports import PortError

log = get_logger("rote.runner.effects")

# The largest output kept in the journal (a key-value entry is one NATS message).
MAX_OUTPUT_BYTES = 256 * 1024
# Longest wait for a call another process is still running, past its own deadline.
RUNNING_GRACE_S = 10.0
# How long an action's outcome is tried in the journal before the run goes on without.
SETTLE_PUT_S = 20.0
# Codes of a call that surely never reached a tools service (see replay.py).
NEVER_REACHED = frozenset({"unavailable"})

Send = Callable[[ExecTool], Awaitable[ToolResult]]
StatusCheck = Callable[[CallStatusQuery], Awaitable[CallStatus]]


class EffectStore(Protocol):
    """Where a run's journal lives: any runner must be able to read it."""

    async def load(self, run_id: str) -> tuple[dict[str, Effect], RunEvent | None]:
        """The run's effects by key, and its terminal event if one was recorded."""
        ...

    async def put(self, effect: Effect) -> None: ...

    async def put_finished(self, event: RunEvent) -> None: ...


class MemoryEffects:
    """An EffectStore in a dict: one process, gone with it."""

    def __init__(self) -> None:
        self.effects: dict[tuple[str, str], Effect] = {}
        self.finished: dict[str, RunEvent] = {}

    async def load(self, run_id: str) -> tuple[dict[str, Effect], RunEvent | None]:
        mine = {key: e for (run, key), e in self.effects.items() if run == run_id}
        return mine, self.finished.get(run_id)

    async def put(self, effect: Effect) -> None:
        self.effects[(effect.run_id, effect.key)] = msgspec.structs.replace(effect)

    async def put_finished(self, event: RunEvent) -> None:
        self.finished[event.run_id] = event


class ActionInDoubt(Exception):
    """An action may or may not have happened, and no check could tell: the run must
    stop here rather than act again or go on as if it had not."""

    def __init__(self, effect: Effect) -> None:
        self.effect = effect
        super().__init__(describe_doubt(effect))


def describe_doubt(effect: Effect) -> str:
    where = f"step {effect.step}" if effect.step is not None else f"action {effect.key}"
    why = effect.note or "its call started and its outcome is unknown"
    return (
        f"{where} ({effect.tool}) may or may not have happened: {why}; rote did not"
        " repeat it. Check whether it took effect, then resume the task"
    )


def recorded_result(effect: Effect) -> ToolResult:
    """The reply an action got, as the journal kept it."""
    return ToolResult(
        ok=bool(effect.ok),
        output=effect.output,
        truncated=effect.truncated,
        duration_ms=0,
        metadata=effect.metadata or ToolMetadata(),
        error=effect.error,
    )


def did_not_act(effect: Effect) -> bool:
    """Whether the action is known not to have happened: it may run (again)."""
    if effect.state == "not_done":
        return True
    error = effect.error
    return (
        effect.state == "done"
        and not effect.ok
        and error is not None
        and (error.code in DID_NOT_ACT)
    )


def _kept_output(output: Any) -> tuple[Any, bool]:
    """The output as the journal keeps it: secrets masked, bounded."""
    masked = redact_value(output)
    if len(encode(masked)) <= MAX_OUTPUT_BYTES:
        return masked, False
    text = masked if isinstance(masked, str) else json.dumps(masked, ensure_ascii=False)
    return cut_text(text, MAX_OUTPUT_BYTES // 4), True


def settled(effect: Effect, result: ToolResult, at: datetime, note: str | None = None) -> Effect:
    output, cut = _kept_output(result.output)
    return msgspec.structs.replace(
        effect,
        state="done",
        ok=result.ok,
        output=output,
        truncated=result.truncated or cut,
        error=result.error,
        metadata=result.metadata,
        settled_at=at,
        note=note,
    )


class RunEffects:
    """The journal of one run, as delivery `attempt` reads and extends it."""

    def __init__(
        self,
        run_id: str,
        attempt: int,
        store: EffectStore,
        check: StatusCheck | None,
        effects: dict[str, Effect] | None = None,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.store = store
        self.check = check
        self.effects: dict[str, Effect] = dict(effects or {})
        self.clock = clock
        # Done actions a full-run call was answered from, or made: each answers one call.
        self.used: set[str] = set()
        # The same for the replay: actions it matched by their tool and input, or made.
        self.replayed: set[str] = set()
        # Calls answered from the journal instead of run (the run's event says how many).
        self.answered = 0

    @classmethod
    async def load(
        cls, run_id: str, attempt: int, store: EffectStore, check: StatusCheck | None
    ) -> tuple[RunEffects, RunEvent | None]:
        effects, finished = await store.load(run_id)
        return cls(run_id, attempt, store, check, effects), finished

    # --- what earlier deliveries left --------------------------------------------------

    def happened(self) -> list[Effect]:
        """The actions of the run that took place, in the order they were intended."""
        done = [e for e in self.effects.values() if e.state == "done" and not did_not_act(e)]
        return sorted(done, key=lambda e: e.intended_at)

    async def settle_earlier(self) -> None:
        """Settle every action an earlier delivery left without an outcome; raises
        ActionInDoubt for the first that cannot be settled."""
        for effect in sorted(self.effects.values(), key=lambda e: e.intended_at):
            if effect.state == "intended":
                effect = await self._settle(effect)
            if effect.state == "in_doubt":
                raise ActionInDoubt(effect)

    async def _settle(self, effect: Effect) -> Effect:
        """Ask the tools service what became of the action's call; record the answer."""
        status = await self._status(effect)
        now = self.clock()
        if status is None:
            changed = msgspec.structs.replace(
                effect,
                state="in_doubt",
                settled_at=now,
                note="the tools service could not be asked what became of its call",
            )
        elif status.state == "finished" and status.result is not None:
            changed = settled(effect, status.result, now, note="its call had finished")
        elif status.state == "fenced":
            changed = msgspec.structs.replace(
                effect, state="not_done", settled_at=now, note="its call never ran"
            )
        else:
            note = "its call started on a tools process that stopped before it finished"
            changed = msgspec.structs.replace(effect, state="in_doubt", settled_at=now, note=note)
        log.info("effect_settled", key=effect.key, tool=effect.tool, state=changed.state)
        await self._put(changed, required=False)
        return changed

    async def _status(self, effect: Effect) -> CallStatus | None:
        """What the tools service says of the call, once it is no longer running; None
        when it cannot be asked."""
        if self.check is None:
            return None
        query = CallStatusQuery(run_id=self.run_id, key=effect.call_key, fence=True)
        with anyio.move_on_after(effect.timeout_s + RUNNING_GRACE_S):
            while True:
                try:
                    status = await self.check(query)
                except PortError as exc:
                    log.warning("effect_status_unknown", key=effect.key, error=exc.message)
                    return None
                if status.state != "running":
                    return status
                until = status.until or self.clock()
                await anyio.sleep(min(1.0, max(0.1, (until - self.clock()).total_seconds())))
        return None

    # --- acting ------------------------------------------------------------------------

    async def run_step(self, key: str, request: ExecTool, send: Send) -> ToolResult:
        """A replay's action at its place `key`: answered from the journal when it
        happened already, else run once and recorded."""
        earlier = self.effects.get(key)
        if earlier is not None and earlier.state == "intended":
            earlier = await self._settle(earlier)
        if earlier is not None and earlier.state == "in_doubt":
            raise ActionInDoubt(earlier)
        if earlier is not None and not did_not_act(earlier):
            self.answered += 1
            log.info("effect_from_journal", key=key, tool=earlier.tool)
            return recorded_result(earlier)
        if earlier is None:
            # Done under another key (another version's step, a full run's call): the
            # same action all the same. This version's own steps have keys of their own.
            version = key.split("-", 1)[0] + "-"
            repeat = self._repeat_of(request, self.replayed, lambda k: k.startswith(version))
            if repeat is not None:
                return repeat
        self.replayed.add(key)
        return await self._run(key, request, send, earlier)

    def _repeat_of(
        self, request: ExecTool, used: set[str], skip: Callable[[str], bool]
    ) -> ToolResult | None:
        """The recorded result of an action the run did with the same tool and input,
        not yet matched on this path (each answers one call); None: there is none."""
        wanted = redact_value(request.input)
        for effect in self.happened():
            if effect.key in used or skip(effect.key):
                continue
            if effect.tool != request.tool or effect.input != wanted:
                continue
            used.add(effect.key)
            self.answered += 1
            log.info("effect_from_journal", key=effect.key, tool=effect.tool)
            return recorded_result(effect)
        return None

    async def run_call(self, request: ExecTool, send: Send) -> ToolResult:
        """A full run's call: an action that repeats one the run already did (same tool,
        same input) gets that one's result; any other runs once and is recorded."""
        if not acts(request.tool):
            return await send(request)
        repeat = self._repeat_of(request, self.used, lambda key: False)
        if repeat is not None:
            return repeat
        key = f"b{self.attempt}-{request.step}"
        # This run's own actions are not repeats of themselves: a second click on "Next"
        # is meant.
        self.used.add(key)
        return await self._run(key, request, send, None)

    async def _run(
        self, key: str, request: ExecTool, send: Send, earlier: Effect | None
    ) -> ToolResult:
        tries = 0 if earlier is None else int(earlier.call_key.rsplit("~", 1)[-1]) + 1
        effect = Effect(
            run_id=self.run_id,
            key=key,
            tool=request.tool,
            input=redact_value(request.input),
            state="intended",
            attempt=self.attempt,
            call_key=f"{key}~{self.attempt}~{tries}",
            source="executor" if request.source == "executor" else "full_llm",
            intended_at=self.clock(),
            timeout_s=request.timeout_s,
            step=request.step,
        )
        await self._put(effect, required=True)
        call = msgspec.structs.replace(request, idempotency_key=effect.call_key)
        try:
            result = await send(call)
        except PortError as exc:
            found = await self._after_failed_call(effect, exc)
            if found is None:
                raise
            return found
        await self._put(settled(effect, result, self.clock()), required=False)
        return result

    async def _after_failed_call(self, effect: Effect, exc: PortError) -> ToolResult | None:
        """The call failed without a reply. Never reached: the action did not happen.
        Otherwise the tools service is asked: a call it finished gives its result, one
        that never ran leaves the failure as it was, one nobody can account for is in
        doubt (ActionInDoubt)."""
        if exc.code in NEVER_REACHED:
            note = f"its call never reached a tools service ({exc.code})"
            changed = msgspec.structs.replace(
                effect, state="not_done", settled_at=self.clock(), note=note
            )
            await self._put(changed, required=False)
            return None
        changed = await self._settle(effect)
        if changed.state == "in_doubt":
            raise ActionInDoubt(changed) from None
        return recorded_result(changed) if changed.state == "done" else None

    async def _put(self, effect: Effect, *, required: bool) -> None:
        """Record the effect. Its intent (`required`) must be recorded before it runs: an
        action the journal does not know of could happen twice. An outcome that cannot
        be recorded is left to the tools service's own record of the call."""
        try:
            if required:
                await self.store.put(effect)
            else:
                # What happened is recorded even as the run's deadline cancels it: left
                # `intended`, the action would have to be asked about, or be in doubt.
                with anyio.CancelScope(shield=True):
                    await self._put_patiently(effect)
        except Exception as exc:
            log.warning("effect_unrecorded", key=effect.key, state=effect.state, error=str(exc))
            if required:  # never sent: as if never intended
                raise PortError(
                    "unavailable", f"the action could not be recorded in the run's journal: {exc}"
                ) from None
        self.effects[effect.key] = effect

    async def _put_patiently(self, effect: Effect) -> None:
        """An outcome is tried again across a JetStream leader election or a NATS blip,
        for up to SETTLE_PUT_S: left `intended`, a later delivery would have to ask."""
        pause = 0.25
        with anyio.fail_after(SETTLE_PUT_S):
            while True:
                try:
                    await self.store.put(effect)
                    return
                except Exception as exc:
                    log.info("effect_put_retried", key=effect.key, error=str(exc))
                await anyio.sleep(pause)
                pause = min(pause * 2, 2.0)

    async def record_finished(self, event: RunEvent) -> None:
        """Keep the run's terminal event beside its effects: a delivery that finds it
        only publishes it again, never runs the run twice."""
        try:
            await self.store.put_finished(event)
        except Exception as exc:
            log.warning("run_end_unrecorded", error=str(exc))


def resume_note(happened: list[Effect]) -> str | None:
    """What a full run is told of the actions its run already did (None: none)."""
    if not happened:
        return None
    lines = []
    for number, effect in enumerate(happened, 1):
        said = effect.output if isinstance(effect.output, str) else json.dumps(effect.output)
        outcome = "ok" if effect.ok else f"failed: {effect.error.code if effect.error else '?'}"
        lines.append(
            f"{number}. {effect.tool} {json.dumps(effect.input, ensure_ascii=False)} -> "
            f"{outcome}: {cut_text(said or '', 500)}"
        )
    return (
        "[rote] This run was interrupted and is being resumed. These actions already"
        " happened in it and must not be done again:\n" + "\n".join(lines) + "\nA call that"
        " repeats one of them (same tool, same input) gets its recorded result instead of"
        " acting again."
    )
