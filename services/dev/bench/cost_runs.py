"""The cost benchmark's runs: each scheduled run of a corpus task measured twice on the
same page state (rote, and an always-full baseline), watched on the bus, and recorded."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ExecutorEvent
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import OnceTrigger, TaskSpec
from services.dev.bench.corpus.site import Layout
from services.dev.bench.corpus.tasks import SITES, CorpusTask, SiteServer
from services.dev.bench.corpus_oracle import expected_answer
from services.executor.cost import full_run_cost
from services.kernel.bus import Bus, routed
from services.kernel.replay_read import read_all

RUN_TIMEOUT_S = 120.0
COMPILE_TIMEOUT_S = 60.0


@dataclass
class RunRecord:
    """One scheduled run of a task: the rote run and the baseline on the same state."""

    task_id: str
    kind: str
    run: int
    layout: Layout
    edition: int
    changed: bool  # the layout changed just before this run
    source: str | None
    status: str
    fell_back: bool
    version: int | None
    cost_usd: float
    duration_ms: int | None
    result: str | None
    replay_failure: str | None
    baseline_status: str
    baseline_cost_usd: float
    baseline_duration_ms: int | None
    baseline_result: str | None
    # "run": a one-time task's full run; "own_full_loop": the rote run's own full loop
    # (quick mode only, when rote ran the full loop on this page state anyway).
    baseline_kind: str = "run"
    full_loop_cost_usd: float | None = None  # the rote run's full loop, without the replay
    compiled: str | None = None  # after a rote full run: "v2" or "skipped: <reason>"
    compile_wait_ms: int | None = None
    oracle_agrees: bool = False  # the baseline's answer is what the offline oracle expects
    rote_oracle_agrees: bool = False  # and the rote run's
    wall_ms: int = 0  # this scheduled run, both runs and the compile wait
    healed: int = 0  # steps the rote run's replay healed in place (it answered with them)

    @property
    def replayed(self) -> bool:
        return self.status == "completed" and self.source == "executor"

    @property
    def full(self) -> bool:
        return self.source == "full_llm"

    @property
    def agrees(self) -> bool:
        return self.status == "completed" and self.result == self.baseline_result


# --- watching the bus -----------------------------------------------------------------------


class Watcher:
    """Run outcomes and compilations as the stack publishes them (core subscriptions, the
    way `nats sub` sees them), each kept until someone asks for it."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.finished: dict[str, RunEvent] = {}
        self.compiled: dict[str, ExecutorEvent] = {}  # by source run id
        self._events: dict[str, anyio.Event] = {}
        self._subs: list[Any] = []

    def _signal(self, key: str) -> None:
        self._events.setdefault(key, anyio.Event()).set()

    async def _on_run(self, msg: Any) -> None:
        event = msgspec.json.decode(msg.data, type=RunEvent)
        self.finished[event.run_id] = event
        self._signal("run:" + event.run_id)

    async def _on_executor(self, msg: Any) -> None:
        event = msgspec.json.decode(msg.data, type=ExecutorEvent)
        if event.run_id:
            self.compiled[event.run_id] = event
            self._signal("exe:" + event.run_id)

    async def start(self) -> None:
        nc = self.bus.nc
        for event in ("completed", "failed"):
            self._subs.append(await nc.subscribe(s.run_events_of(event=event), cb=self._on_run))
        for event in ("compiled", "skipped"):
            self._subs.append(
                await nc.subscribe(s.executor_event("*", event), cb=self._on_executor)
            )
        await routed(nc)

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _wait(self, key: str, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            await self._events.setdefault(key, anyio.Event()).wait()
            return True
        return False

    async def run(self, spec: TaskSpec, task_id: str) -> RunEvent:
        started = await self.bus.request(
            s.RUNS_START, StartRun(spec=spec, task_id=task_id), RunStarted
        )
        if not await self._wait("run:" + started.run_id, RUN_TIMEOUT_S):
            # A missed core message is not a lost run: the stream has it.
            for m in await read_all(
                self.bus.js, s.STREAM_RUNS, s.run_events_of(run_id=started.run_id)
            ):
                event = msgspec.json.decode(m.data, type=RunEvent)
                if event.event in ("completed", "failed"):
                    return event
            raise TimeoutError(f"run {started.run_id} of {task_id} did not finish")
        return self.finished.pop(started.run_id)

    async def compilation(self, task_id: str, run_id: str) -> str:
        """What the compiler made of a full run's trace: "v<N>" or "skipped: ..."."""
        event: ExecutorEvent | None = None
        if await self._wait("exe:" + run_id, COMPILE_TIMEOUT_S):
            event = self.compiled.pop(run_id)
        else:
            for m in await read_all(
                self.bus.js, s.STREAM_EXECUTORS, s.executor_event(task_id, "*")
            ):
                candidate = msgspec.json.decode(m.data, type=ExecutorEvent)
                if candidate.run_id == run_id and candidate.event in ("compiled", "skipped"):
                    event = candidate
        if event is None:
            return "not compiled (no compiler event)"
        if event.event == "compiled":
            return f"v{event.version}"
        return f"skipped: {event.reason}"


async def _both(a: Awaitable[RunEvent], b: Awaitable[RunEvent]) -> tuple[RunEvent, RunEvent]:
    out: dict[int, RunEvent] = {}

    async def keep(i: int, aw: Awaitable[RunEvent]) -> None:
        out[i] = await aw

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep, 0, a)
        tg.start_soon(keep, 1, b)
    return out[0], out[1]


# --- driving one task -----------------------------------------------------------------------


def _full_loop(done: RunEvent) -> bool:
    return done.source == "full_llm" and done.status == "completed"


def _full_loop_cost(done: RunEvent) -> float:
    """What the full loop of a rote run cost, as the compiler counts it (a fallback's
    failed replay and a redelivered run's dead attempts left out)."""
    return full_run_cost(done) or 0.0


def _always_full(base: RunEvent, task_id: str, run: int) -> RunEvent:
    """A baseline run, checked to be what it stands for: a full LLM run from scratch. One
    that replayed (or tried to) would turn agreement into replay-vs-replay unnoticed."""
    assert base.source == "full_llm" and base.replay is None, (
        f"{task_id} run {run}: the always-full baseline {base.run_id} ran as "
        f"{base.source or 'no source'}{' after a replay attempt' if base.replay else ''}"
    )
    return base


def _as_baseline(done: RunEvent) -> RunEvent:
    replay_ms = done.replay.duration_ms if done.replay else 0
    return msgspec.structs.replace(
        done,
        cost_usd=_full_loop_cost(done),
        duration_ms=None if done.duration_ms is None else done.duration_ms - replay_ms,
    )


async def _measure(
    watcher: Watcher, task: CorpusTask, specs: tuple[TaskSpec, TaskSpec], run: int, shortcut: bool
) -> tuple[RunEvent, RunEvent, str]:
    """The rote run and its baseline on the page state in force, and the baseline's kind."""
    rote, always_full = specs
    if shortcut:
        done = await watcher.run(rote, task.task_id)
        if _full_loop(done):
            # The stand-in is deterministic: a full loop on this page state is the
            # baseline's very conversation (checked in the full benchmark).
            return done, _as_baseline(done), "own_full_loop"
        base = await watcher.run(always_full, f"{task.task_id}-full")
        return done, _always_full(base, task.task_id, run), "run"
    # Both read the same page state (neither changes it): run them side by side.
    done, base = await _both(
        watcher.run(rote, task.task_id),
        watcher.run(always_full, f"{task.task_id}-full"),
    )
    return done, _always_full(base, task.task_id, run), "run"


async def _compilation(
    watcher: Watcher, task: CorpusTask, done: RunEvent
) -> tuple[str | None, int | None]:
    """After a rote full run, what the compiler made of it and how long that took."""
    if not _full_loop(done):
        return None, None
    # An hourly task has all the time in the world to compile before its next run; wait
    # for it so the next run sees what a scheduled one would.
    waited = time.perf_counter()
    compiled = await watcher.compilation(task.task_id, done.run_id)
    return compiled, int((time.perf_counter() - waited) * 1000)


def _oracle(task: CorpusTask, site: SiteServer) -> str | None:
    try:
        return expected_answer(task, site)
    except AssertionError:
        return None


async def drive(
    watcher: Watcher,
    task: CorpusTask,
    runs: int,
    changes: tuple[int, ...] | None,
    *,
    shortcut: bool = False,
) -> list[RunRecord]:
    """Run one task `runs` times on its schedule, each run on a fresh edition. With
    `shortcut`, a rote run that ran the full loop is its own baseline."""
    records: list[RunRecord] = []
    with SiteServer(SITES[task.site]) as site:
        prompt = task.prompt_for(site.url)
        rote = TaskSpec(name=task.task_id, prompt=prompt)
        always_full = TaskSpec(
            name=f"{task.task_id} (always full)", prompt=prompt, trigger=OnceTrigger(at=utc_now())
        )
        previous: Layout | None = None
        for run in range(1, runs + 1):
            layout = task.layout_at(run, changes)
            site.layout, site.edition = layout, run - 1
            began = time.perf_counter()
            done, base, baseline_kind = await _measure(
                watcher, task, (rote, always_full), run, shortcut
            )
            compiled, compile_wait_ms = await _compilation(watcher, task, done)
            oracle = _oracle(task, site)
            records.append(
                _record(
                    task,
                    run,
                    layout,
                    previous is not None and layout != previous,
                    (done, base, baseline_kind),
                    (compiled, compile_wait_ms),
                    oracle,
                    int((time.perf_counter() - began) * 1000),
                )
            )
            previous = layout
    return records


def _record(
    task: CorpusTask,
    run: int,
    layout: Layout,
    changed: bool,
    measured: tuple[RunEvent, RunEvent, str],
    compilation: tuple[str | None, int | None],
    oracle: str | None,
    wall_ms: int,
) -> RunRecord:
    done, base, baseline_kind = measured
    replay = done.replay
    return RunRecord(
        task_id=task.task_id,
        kind=task.kind,
        run=run,
        layout=layout,
        edition=run - 1,
        changed=changed,
        source=done.source,
        status=done.status,
        fell_back=done.fell_back,
        version=done.executor_version if done.source == "executor" else None,
        cost_usd=done.cost_usd,
        duration_ms=done.duration_ms,
        result=done.result,
        replay_failure=(
            f"step {replay.step}: {replay.reason}" if replay and not replay.ok else None
        ),
        baseline_status=base.status,
        baseline_cost_usd=base.cost_usd,
        baseline_duration_ms=base.duration_ms,
        baseline_result=base.result,
        baseline_kind=baseline_kind,
        full_loop_cost_usd=_full_loop_cost(done) if _full_loop(done) else None,
        compiled=compilation[0],
        compile_wait_ms=compilation[1],
        oracle_agrees=base.result == oracle,
        rote_oracle_agrees=done.result == oracle,
        wall_ms=wall_ms,
        healed=len(replay.healed_steps) if replay and replay.ok else 0,
    )
