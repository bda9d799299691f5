"""The drift benchmark's runs: each scheduled run of a drift task measured twice on the
same page state (rote, and an always-full baseline), its answers judged against the
ground truth, and what the run event says about the replay's verification.

How a run is read as *flagged*: from the run event's `replay.verification`
(contracts.runs.Verification; services/runner/README.md, "Trusting a replayed answer").
`status` is the verdict: `verified` (a check found the answer supported), `unverified`
(flagged and not cleared: delivered with that label), `wrong` (a check judged the answer
wrong: the run runs the full loop, as after a break, and its `replay.ok` is false with a
reason starting "verification"), `skipped` (not checked: not flagged, not sampled). A
replay counts as flagged when `flagged` is true or its status is `unverified` or `wrong`,
so a clean replay the fingerprints flagged and a check then cleared is still a false
alarm; a wrong answer a flagged run still delivers counts as delivered. A run event with
no verification (no replay, or one that broke before its answer) reads as status "none".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent, RunRef, Transcript
from contracts.tasks import OnceTrigger, TaskSpec
from services.dev.bench.cost_runs import Watcher
from services.dev.bench.drift.judge import judge
from services.dev.bench.drift.tasks import DriftTask, Scheduled, schedule, server_for
from services.dev.bench.drift.truth import truth_of
from services.executor.cost import full_run_cost
from services.kernel.bus import Bus

FLAGGED = frozenset({"unverified", "wrong"})


@dataclass(frozen=True)
class Verification:
    status: str = "none"  # none: the event says nothing (rote before issue 31)
    method: str | None = None
    reasons: tuple[str, ...] = ()
    cost_usd: float = 0.0
    raised: bool = False  # the event's `flagged`

    @property
    def flagged(self) -> bool:
        return self.raised or self.status in FLAGGED


def verification_of(event: dict[str, Any] | None) -> Verification:
    """The replay's verification as the run event states it (see the module docstring)."""
    replay = (event or {}).get("replay") or {}
    stated = replay.get("verification")
    if isinstance(stated, dict):
        return Verification(
            status=str(stated.get("status") or "none"),
            method=stated.get("method"),
            reasons=tuple(str(r) for r in stated.get("reasons") or ()),
            cost_usd=float(stated.get("cost_usd") or 0.0),
            raised=bool(stated.get("flagged")),
        )
    if (
        replay
        and not replay.get("ok", True)
        and str(replay.get("reason", "")).startswith("verification")
    ):
        return Verification(status="wrong", reasons=(str(replay["reason"]),))
    return Verification()


@dataclass
class DriftRecord:
    """One scheduled run: the rote run and the always-full baseline on one page state."""

    task_id: str
    form: str
    run: int
    layout: str
    drifts: list[str]
    onset: str | None
    broke: bool  # the layout changed just before this run
    source: str | None
    status: str
    fell_back: bool
    replay_version: int | None  # the version the run replayed (or tried to)
    replay_ok: bool | None
    replay_failure: str | None
    cost_usd: float
    result: str | None
    right: bool
    why: str
    truth: str
    baseline_cost_usd: float
    baseline_result: str | None
    baseline_right: bool
    baseline_kind: str
    verification: Verification = field(default_factory=Verification)
    compiled: str | None = None  # after a rote full run: "v2" or "skipped: ..."
    compiled_under: list[str] | None = None  # the drifts of the page the replayed version
    # was compiled on (None: no replay)
    # A replay whose check judged its answer wrong: whether that answer, withheld, was in
    # fact right (None: no answer was withheld). A right one withheld is a false alarm.
    withheld_right: bool | None = None

    @property
    def replayed(self) -> bool:
        """The run answered from a replay (it did not fall back)."""
        return self.status == "completed" and self.source == "executor"

    @property
    def delivered_wrong(self) -> bool:
        return self.status == "completed" and not self.right

    @property
    def needless_alarm(self) -> bool:
        """Flagged, or checked and withheld, with an answer that was right."""
        if self.withheld_right is not None:
            return self.withheld_right
        return self.verification.flagged and self.replayed and self.right

    @property
    def clean(self) -> bool:
        """A replay on a page that means what the page its version was compiled on meant."""
        return self.compiled_under is not None and sorted(self.compiled_under) == self.drifts


async def _measure(
    watcher: Watcher, task: DriftTask, specs: tuple[TaskSpec, TaskSpec], own: bool
) -> tuple[RunEvent, RunEvent, str]:
    rote, always_full = specs
    if own:
        done = await watcher.run(rote, task.task_id)
        if done.source == "full_llm" and done.replay is None:
            return done, done, "own_full_loop"
        base = await watcher.run(always_full, f"{task.task_id}-full")
        return done, base, "run"
    out: dict[str, RunEvent] = {}

    async def one(name: str, spec: TaskSpec, task_id: str) -> None:
        out[name] = await watcher.run(spec, task_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "rote", rote, task.task_id)
        tg.start_soon(one, "base", always_full, f"{task.task_id}-full")
    return out["rote"], out["base"], "run"


def _record(
    task: DriftTask,
    planned: Scheduled,
    measured: tuple[RunEvent, RunEvent, str],
    raw: dict[str, Any] | None,
    compiled_under: list[str] | None,
) -> DriftRecord:
    done, base, baseline_kind = measured
    truth = truth_of(task, planned.state)
    verdict, base_verdict = judge(done.result, truth), judge(base.result, truth)
    replay = done.replay
    return DriftRecord(
        task_id=task.task_id,
        form=task.form,
        run=planned.run,
        layout=planned.state.layout,
        drifts=sorted(planned.state.drifts),
        onset=planned.onset,
        broke=planned.broke,
        source=done.source,
        status=done.status,
        fell_back=done.fell_back,
        replay_version=replay.version if replay else None,
        replay_ok=replay.ok if replay else None,
        replay_failure=f"step {replay.step}: {replay.reason}" if replay and not replay.ok else None,
        cost_usd=done.cost_usd,
        result=done.result,
        right=done.status == "completed" and verdict.ok,
        why=verdict.why,
        truth=truth.describe(),
        baseline_cost_usd=full_run_cost(base) or base.cost_usd,
        baseline_result=base.result,
        baseline_right=base.status == "completed" and base_verdict.ok,
        baseline_kind=baseline_kind,
        verification=verification_of(raw),
        compiled_under=compiled_under,
    )


async def drive(watcher: Watcher, task: DriftTask, quick: bool) -> list[DriftRecord]:
    """Run one task through its schedule, rote and always-full on each page state."""
    records: list[DriftRecord] = []
    versions: dict[int, list[str]] = {}  # version -> the drifts of the page it was compiled on
    with server_for(task) as site:
        prompt = task.prompt_for(site.url)
        rote = TaskSpec(name=task.task_id, prompt=prompt)
        always_full = TaskSpec(
            name=f"{task.task_id} (always full)", prompt=prompt, trigger=OnceTrigger(at=utc_now())
        )
        for planned in schedule(task, quick):
            site.state = planned.state
            measured = await _measure(
                watcher, task, (rote, always_full), quick and planned.run == 1
            )
            done = measured[0]
            replayed = done.replay.version if done.replay else None
            record = _record(
                task,
                planned,
                measured,
                msgspec.to_builtins(done),
                versions.get(replayed) if replayed is not None else None,
            )
            if record.verification.status == "wrong":
                withheld = await withheld_answer(watcher.bus, done.run_id)
                if withheld is not None:
                    record.withheld_right = judge(withheld, truth_of(task, planned.state)).ok
            if done.source == "full_llm" and done.status == "completed":
                # An hourly task has time to compile before its next run: wait for it.
                record.compiled = await watcher.compilation(task.task_id, done.run_id)
                if record.compiled.startswith("v"):
                    versions[int(record.compiled[1:])] = sorted(planned.state.drifts)
            records.append(record)
    return records


async def withheld_answer(bus: Bus, run_id: str) -> str | None:
    """The answer a replay wrote before its check withheld it, from the run's transcript."""
    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    for entry in transcript.entries:
        detail = entry.detail or {}
        if entry.kind == "replay_step" and isinstance(detail.get("answer"), str):
            return str(detail["answer"])
    return None
