"""Cost: rote against always-full-LLM runs, on the same page states.

The whole stack runs in-process (an embedded NATS with JetStream; system, llm, tools,
compiler, tracer, runner; real Chromium; SQLite event stores in a temporary data dir)
with the stand-in model over HTTP through the anthropic SDK. Each corpus task
(services/dev/demo/corpus.py) gets its own local site and runs on a schedule: the content
edition advances every run, and the layout changes before the runs the task names (a
redesign). For every run, on the same page state:

  rote      the task under its own id: run 1 is a full LLM run that compiles v1; later
            runs replay the active executor, or fall back to a full run (and compile
            the next version) when the replay breaks;
  baseline  the same prompt under a one-time task id (trigger `once`, which the compiler
            never compiles): always a full LLM run. Its answer is also checked against
            what services/dev/bench/corpus_oracle.py expects from the page, offline.

Costs are the runner's own accounting (tokens x list prices) from each run's completed
event. Targets: median replay cost <= 1 % of the full run on the same page state; answer
agreement (replay == baseline) >= 99 %; exactly 1 full run per layout change that breaks
the executor; a projected month of hourly runs with a weekly layout change <= 3 % of
always-full. Quick mode (3 tasks x 4 runs, one redesign) lets a rote run that ran the
full loop stand as its own baseline; the full benchmark runs every baseline and checks
that such pairs are the same conversation.

    python -m services.dev.bench.bench_cost [--quick]
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ExecutorEvent
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import OnceTrigger, TaskSpec
from services.dev.bench.corpus_oracle import expected_answer
from services.dev.bench.harness import Metric, Section, render_table, to_json
from services.dev.demo.corpus import SITES, TASKS, TASKS_BY_ID, CorpusTask, Layout, SiteServer
from services.dev.standin.server import StandinServer
from services.executor.cost import full_run_cost
from services.kernel.bus import Bus, routed
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.logs import configure_logging
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

SERVICES = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
RUNS = 10
QUICK_RUNS = 4
QUICK_TASKS = ("gazette-top3", "kitchen-stock", "townhall-signup")
QUICK_CHANGES = (3,)  # quick mode: one redesign, before run 3
CONCURRENT_TASKS = 3  # tasks in flight at once (one run each); Chromium shares 2 cores
RUN_TIMEOUT_S = 120.0
COMPILE_TIMEOUT_S = 60.0

# The projection: a month of hourly runs, a layout change every week.
MONTH_RUNS = 24 * 30
MONTH_CHANGES = 30 / 7

TARGET_REPLAY_SHARE = 0.01
TARGET_AGREEMENT = 0.99
TARGET_MONTH_SHARE = 0.03


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
            baseline_kind = "run"
            began = time.perf_counter()
            if shortcut:
                done = await watcher.run(rote, task.task_id)
                if _full_loop(done):
                    # The stand-in is deterministic: a full loop on this page state is the
                    # baseline's very conversation (checked in the full benchmark).
                    base, baseline_kind = _as_baseline(done), "own_full_loop"
                else:
                    base = await watcher.run(always_full, f"{task.task_id}-full")
                    base = _always_full(base, task.task_id, run)
            else:
                # Both read the same page state (neither changes it): run them side by side.
                done, base = await _both(
                    watcher.run(rote, task.task_id),
                    watcher.run(always_full, f"{task.task_id}-full"),
                )
                base = _always_full(base, task.task_id, run)
            compiled, compile_wait_ms = None, None
            if _full_loop(done):
                # An hourly task has all the time in the world to compile before its next
                # run; wait for it so the next run sees what a scheduled one would.
                waited = time.perf_counter()
                compiled = await watcher.compilation(task.task_id, done.run_id)
                compile_wait_ms = int((time.perf_counter() - waited) * 1000)
            replay = done.replay
            try:
                oracle: str | None = expected_answer(task, site)
            except AssertionError:
                oracle = None
            records.append(
                RunRecord(
                    task_id=task.task_id,
                    kind=task.kind,
                    run=run,
                    layout=layout,
                    edition=run - 1,
                    changed=previous is not None and layout != previous,
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
                    compiled=compiled,
                    compile_wait_ms=compile_wait_ms,
                    oracle_agrees=base.result == oracle,
                    rote_oracle_agrees=done.result == oracle,
                    wall_ms=int((time.perf_counter() - began) * 1000),
                )
            )
            previous = layout
    return records


# --- the numbers ----------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class ChangeOutcome:
    task_id: str
    before_run: int
    layout: str
    broke: bool  # the first run on the new layout could not replay
    full_runs: int  # full runs from the change up to the next one
    silent: bool  # replayed, but the answer differs from the baseline's


def changes_of(records: list[RunRecord]) -> list[ChangeOutcome]:
    out = []
    by_task: dict[str, list[RunRecord]] = {}
    for r in records:
        by_task.setdefault(r.task_id, []).append(r)
    for task_id, rows in by_task.items():
        starts = [i for i, r in enumerate(rows) if r.changed]
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(rows)
            window = rows[start:end]
            first = window[0]
            out.append(
                ChangeOutcome(
                    task_id=task_id,
                    before_run=first.run,
                    layout=first.layout,
                    broke=not first.replayed,
                    full_runs=sum(1 for r in window if r.full),
                    silent=first.replayed and not first.agrees,
                )
            )
    return out


def task_row(task: CorpusTask, rows: list[RunRecord]) -> dict[str, Any]:
    full = [r.baseline_cost_usd for r in rows if r.baseline_status == "completed"]
    replays = [r for r in rows if r.replayed]
    replay_costs = [r.cost_usd for r in replays]
    ratios = [r.cost_usd / r.baseline_cost_usd for r in replays if r.baseline_cost_usd > 0]
    fallbacks = [r for r in rows if r.fell_back]
    return {
        "task": task.task_id,
        "kind": task.kind,
        "full_cost_usd": round(_median(full), 6),
        "replay_cost_usd": round(_median(replay_costs), 8) if replay_costs else None,
        "replay_over_full": round(_median(ratios), 5) if ratios else None,
        "runs": len(rows),
        "replays": len(replays),
        "fallbacks": len(fallbacks),
        "full_runs": sum(1 for r in rows if r.full),
        "agreement": round(sum(r.agrees for r in replays) / len(replays), 4) if replays else None,
        "rote_cost_usd": round(sum(r.cost_usd for r in rows), 6),
        "always_full_cost_usd": round(sum(r.baseline_cost_usd for r in rows), 6),
        "layouts": "->".join(dict.fromkeys(r.layout for r in rows)),
        "compiled": [r.compiled for r in rows if r.compiled],
    }


def project_month(
    task: CorpusTask, rows: list[RunRecord], changes: list[ChangeOutcome]
) -> tuple[float, float]:
    """(rote, always-full) USD for MONTH_RUNS hourly runs with MONTH_CHANGES layout changes,
    from this task's measured costs: its first full run, replays at their mean cost, and
    each change that breaks (at the share measured for the task) costing a fallback run."""
    full = _mean([r.baseline_cost_usd for r in rows if r.baseline_status == "completed"])
    replays = [r.cost_usd for r in rows if r.replayed]
    replay = _mean(replays) if replays else full
    fallbacks = [r.cost_usd for r in rows if r.fell_back]
    fallback = _mean(fallbacks) if fallbacks else replay + full
    mine = [c for c in changes if c.task_id == task.task_id]
    # A task whose schedule had no change is assumed to break on every one.
    break_share = sum(c.broke for c in mine) / len(mine) if mine else 1.0
    breaks = MONTH_CHANGES * break_share
    rote = full + breaks * fallback + (MONTH_RUNS - 1 - breaks) * replay
    return rote, MONTH_RUNS * full


def _right(r: RunRecord) -> str:
    """Which answer of a disagreeing pair the offline oracle confirms."""
    if r.rote_oracle_agrees:
        return "rote"
    return "full" if r.oracle_agrees else "neither"


def _pct(part: float, whole: float, digits: int = 3) -> float:
    return round(part / whole * 100, digits) if whole else float("nan")


def summarise(
    tasks: list[CorpusTask], records: list[RunRecord], duration_s: float, quick: bool
) -> Section:
    by_task = {t.task_id: [r for r in records if r.task_id == t.task_id] for t in tasks}
    rows = [task_row(t, by_task[t.task_id]) for t in tasks]
    replays = [r for r in records if r.replayed]
    after_first = [r for r in records if r.run > 1]

    # Cost of a replay against the full run on the same page state.
    ratios = [r.cost_usd / r.baseline_cost_usd for r in replays if r.baseline_cost_usd > 0]
    median_ratio = _median(ratios)
    worst_task = max(
        (row["replay_over_full"] for row in rows if row["replay_over_full"] is not None),
        default=float("nan"),
    )
    agreement = sum(r.agrees for r in replays) / len(replays) if replays else 0.0
    replays_as_oracle = sum(r.rote_oracle_agrees for r in replays)

    # Layout changes: which broke the executor, and how many full runs each cost.
    changes = changes_of(records)
    broke = [c for c in changes if c.broke]
    per_change = [c.full_runs for c in broke]
    exact = bool(per_change) and all(n == 1 for n in per_change)
    # Full runs after the first other than the one fallback each breaking change costs.
    explained = {(c.task_id, c.before_run) for c in broke}
    unexplained = [r for r in after_first if r.full and (r.task_id, r.run) not in explained]
    heals = healable = 0
    for task_rows in by_task.values():
        for r, nxt in itertools.pairwise(task_rows):
            if r.fell_back:
                healable += 1
                heals += nxt.replayed

    rote_total = sum(r.cost_usd for r in records)
    full_total = sum(r.baseline_cost_usd for r in records)
    month_rote = month_full = 0.0
    for t in tasks:
        rote, full = project_month(t, by_task[t.task_id], changes)
        month_rote += rote
        month_full += full
    month_share = month_rote / month_full if month_full else float("nan")

    # The stand-in is deterministic: a rote full loop and the baseline on the same page
    # state must be the same conversation (what lets quick mode skip such baselines).
    twins = [r for r in records if r.full_loop_cost_usd is not None and r.baseline_kind == "run"]
    same = [
        r
        for r in twins
        if abs((r.full_loop_cost_usd or 0.0) - r.baseline_cost_usd) < 1e-9
        and r.result == r.baseline_result
    ]
    replay_ms = [float(r.duration_ms) for r in replays if r.duration_ms is not None]
    full_ms = [float(r.baseline_duration_ms) for r in records if r.baseline_duration_ms]
    unexpected = [
        f"{c.task_id} before run {c.before_run}: {'broke' if c.broke else 'survived'}, the "
        f"corpus expects it to {'break' if TASKS_BY_ID[c.task_id].breaks else 'survive'}"
        for c in changes
        if c.broke != TASKS_BY_ID[c.task_id].breaks
    ]

    metrics = [
        Metric("median replay cost / full run cost", round(median_ratio * 100, 4), "%",
               f"<= {TARGET_REPLAY_SHARE * 100:g} %", median_ratio <= TARGET_REPLAY_SHARE),
        Metric("worst task's median replay / full", round(worst_task * 100, 4), "%"),
        Metric("answer agreement, replay vs full run on the same page", round(agreement * 100, 2),
               "%", f">= {TARGET_AGREEMENT * 100:g} %",
               bool(replays) and agreement >= TARGET_AGREEMENT),
        Metric("replay answers as the page says (offline oracle)",
               _pct(replays_as_oracle, len(replays), 2), "%"),
        Metric("full run answers as the page says (offline oracle)",
               _pct(sum(r.oracle_agrees for r in records), len(records), 2), "%"),
        Metric("full runs per breaking layout change",
               round(_mean([float(n) for n in per_change]), 3) if per_change else 0.0, "runs",
               "exactly 1 each", exact),
        Metric("layout changes that broke the executor", len(broke), "changes"),
        Metric("layout changes replays survived", len(changes) - len(broke), "changes"),
        Metric("other full runs after the first", len(unexplained), "runs"),
        Metric("hit rate (replayed / runs after the first)",
               _pct(len(replays), len(after_first), 2), "%"),
        Metric("heal rate (replayed the run after a break)", _pct(heals, healable, 2), "%"),
        Metric("total cost rote / always-full", _pct(rote_total, full_total), "%"),
        Metric("projected month rote / always-full (hourly, weekly redesign)",
               round(month_share * 100, 3), "%", f"<= {TARGET_MONTH_SHARE * 100:g} %",
               month_share <= TARGET_MONTH_SHARE),
        Metric("projected month, rote", round(month_rote, 4), "USD"),
        Metric("projected month, always-full", round(month_full, 4), "USD"),
        Metric("replay run duration p50", _median(replay_ms), "ms"),
        Metric("full run duration p50", _median(full_ms), "ms"),
    ]  # fmt: skip
    notes = (
        f"{len(tasks)} tasks x {len(records) // max(1, len(tasks))} runs on local sites "
        "(content changes every run, layout changes on a schedule); each run measured twice on "
        "the same page state: rote (a replay, or a full run and recompilation after a break) "
        "and a one-time task's full LLM run (always-full). Stand-in model priced as Sonnet 5.5 "
        "(full runs) and Haiku 5.5 (replay steps). The month is a PROJECTION from the measured "
        f"per-run costs ({MONTH_RUNS} hourly runs, {MONTH_CHANGES:.2f} layout changes each "
        "breaking at the share measured for the task, the first full run included), not a "
        "measurement."
        + (" Quick mode: a rote run that ran the full loop is its own baseline." if quick else "")
    )
    return Section(
        name="cost",
        metrics=metrics,
        notes=notes,
        details={
            "duration_s": round(duration_s, 1),
            "quick": quick,
            "tasks": rows,
            "rote_runs": len(records),
            "baseline_runs": sum(r.baseline_kind == "run" for r in records),
            "baseline_runs_completed": sum(
                r.baseline_kind == "run" and r.baseline_status == "completed" for r in records
            ),
            "rote_total_usd": round(rote_total, 6),
            "always_full_total_usd": round(full_total, 6),
            "full_loops_equal_to_baseline": f"{len(same)}/{len(twins)}",
            "full_run_answers_as_oracle_expects": (
                f"{sum(r.oracle_agrees for r in records)}/{len(records)}"
            ),
            "oracle_mismatches": [
                {"task": r.task_id, "run": r.run, "full": r.baseline_result}
                for r in records
                if not r.oracle_agrees
            ],
            "changes": [asdict(c) for c in changes],
            "changes_not_as_corpus_expects": unexpected,
            "unexplained_full_runs": [
                {"task": r.task_id, "run": r.run, "compiled": r.compiled} for r in unexplained
            ],
            "replay_failures": [
                {"task": r.task_id, "run": r.run, "reason": r.replay_failure}
                for r in records
                if r.replay_failure
            ],
            "disagreements": [
                {
                    "task": r.task_id,
                    "run": r.run,
                    "rote": r.result,
                    "full": r.baseline_result,
                    "right_per_oracle": _right(r),
                }
                for r in records
                if not r.agrees
            ],
            "runs": [
                {
                    "task": r.task_id,
                    "run": r.run,
                    "layout": r.layout,
                    "edition": r.edition,
                    "source": r.source,
                    "v": r.version,
                    "fell_back": r.fell_back,
                    "cost": r.cost_usd,
                    "full_cost": r.baseline_cost_usd,
                    "agrees": r.agrees,
                    "ms": r.duration_ms,
                    "full_ms": r.baseline_duration_ms,
                    "compiled": r.compiled,
                    "compile_wait_ms": r.compile_wait_ms,
                    "wall_ms": r.wall_ms,
                }
                for r in records
            ],
        },
    )


# --- the stack ------------------------------------------------------------------------------


@contextlib.contextmanager
def standin_env(url: str) -> Iterator[None]:
    """Point the anthropic SDK at the stand-in for the stack's lifetime, then restore."""
    names = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["ANTHROPIC_BASE_URL"] = url
    os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-standin-0000"
    os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def plan(quick: bool) -> tuple[list[CorpusTask], int, tuple[int, ...] | None]:
    if quick:
        return [TASKS_BY_ID[t] for t in QUICK_TASKS], QUICK_RUNS, QUICK_CHANGES
    return list(TASKS), RUNS, None


async def run(quick: bool) -> Section:
    began = time.perf_counter()
    tasks, runs, changes = plan(quick)
    concurrency = len(tasks) if quick else CONCURRENT_TASKS
    records: dict[str, list[RunRecord]] = {}
    with contextlib.ExitStack() as resources:
        tmp = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="rote-bench-cost-")))
        standin = resources.enter_context(StandinServer())
        # Started here, on the event loop's thread, rather than by open_stack (which starts
        # it from a worker thread): the server dies with the thread that started it.
        nats = resources.enter_context(EmbeddedNats(tmp / "nats", port=free_port()))
        settings = Settings(
            nats_url=nats.url,
            data_dir=tmp / "data",
            event_store="sqlite",
            log_format="json",
            log_level="warning",
            # A rote run and its baseline per task in flight.
            runner_slots=2 * concurrency,
            # The wait before retrying a failed replay step: latency only, never cost.
            replay_backoff_s=0.2,
        )
        settings.data_dir.mkdir(parents=True)
        with standin_env(standin.url):
            async with open_stack(settings, SERVICES) as stack:
                startup_s = time.perf_counter() - began
                watcher = Watcher(stack.bus)
                await watcher.start()
                limiter = anyio.CapacityLimiter(concurrency)

                async def one(task: CorpusTask) -> None:
                    async with limiter:
                        records[task.task_id] = await drive(
                            watcher, task, runs, changes, shortcut=quick
                        )

                try:
                    async with anyio.create_task_group() as tg:
                        for task in tasks:
                            tg.start_soon(one, task)
                finally:
                    await watcher.stop()
    flat = [r for t in tasks for r in records.get(t.task_id, [])]
    section = summarise(tasks, flat, time.perf_counter() - began, quick)
    section.details["startup_s"] = round(startup_s, 2)
    return section


def task_table(section: Section) -> str:
    cols = ["task", "kind", "full_cost_usd", "replay_cost_usd", "replay_over_full", "runs",
            "replays", "fallbacks", "agreement"]  # fmt: skip
    rows = [cols] + [
        ["" if row[c] is None else str(row[c]) for c in cols] for row in section.details["tasks"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    configure_logging("json", "warning")
    quick = "--quick" in sys.argv
    began = time.perf_counter()
    section = anyio.run(run, quick, backend="asyncio")
    print(to_json([section], time.perf_counter() - began, quick))
    print(render_table([section]))
    print()
    print(task_table(section))
