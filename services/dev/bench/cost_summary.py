"""The cost benchmark's numbers: from the run records, the cost of a replay against a
full run on the same page state, answer agreement, what each layout change cost, and a
month projected from the measured per-run costs."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from services.dev.bench.corpus.tasks import TASKS_BY_ID, CorpusTask
from services.dev.bench.cost_runs import RunRecord
from services.dev.bench.harness import Metric, Section

# The projection: a month of hourly runs, a layout change every week.
MONTH_RUNS = 24 * 30
MONTH_CHANGES = 30 / 7

TARGET_REPLAY_SHARE = 0.01
TARGET_AGREEMENT = 0.99
TARGET_MONTH_SHARE = 0.03
# Healing (issue 32): most breaking changes heal with no full run, and the run that meets
# a change costs a small share of a full run.
TARGET_HEALED_SHARE = 0.80
TARGET_MEETING_SHARE = 0.10


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class ChangeOutcome:
    task_id: str
    before_run: int
    layout: str
    broke: bool  # the first run on the new layout could not replay as recorded
    healed: bool  # ... and healed the broken steps in place (no full run)
    full_runs: int  # full runs from the change up to the next one
    silent: bool  # replayed (as recorded), but the answer differs from the baseline's
    # What the first run on the new layout cost, over a full run on the same page.
    cost_share: float | None = None


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
            healed = first.replayed and first.healed > 0
            out.append(
                ChangeOutcome(
                    task_id=task_id,
                    before_run=first.run,
                    layout=first.layout,
                    broke=not first.replayed or healed,
                    healed=healed,
                    full_runs=sum(1 for r in window if r.full),
                    silent=first.replayed and not healed and not first.agrees,
                    cost_share=(
                        first.cost_usd / first.baseline_cost_usd
                        if first.baseline_cost_usd > 0
                        else None
                    ),
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
    heals = [r.cost_usd for r in rows if r.replayed and r.healed]
    heal = _mean(heals) if heals else fallback
    mine = [c for c in changes if c.task_id == task.task_id]
    # A task whose schedule had no change is assumed to break (and fall back) on every one.
    fall_share = sum(c.broke and not c.healed for c in mine) / len(mine) if mine else 1.0
    heal_share = sum(c.healed for c in mine) / len(mine) if mine else 0.0
    falls, healed = MONTH_CHANGES * fall_share, MONTH_CHANGES * heal_share
    rote = full + falls * fallback + healed * heal + (MONTH_RUNS - 1 - falls - healed) * replay
    return rote, MONTH_RUNS * full


def _right(r: RunRecord) -> str:
    """Which answer of a disagreeing pair the offline oracle confirms."""
    if r.rote_oracle_agrees:
        return "rote"
    return "full" if r.oracle_agrees else "neither"


def _pct(part: float, whole: float, digits: int = 3) -> float:
    return round(part / whole * 100, digits) if whole else float("nan")


@dataclass
class LayoutChanges:
    """What the layout changes did: which broke the executor, the full runs each cost,
    the full runs no breaking change explains, and how often the run after a break replayed."""

    changes: list[ChangeOutcome]
    broke: list[ChangeOutcome]
    per_change: list[int]  # full runs of each breaking change that did not heal
    exact: bool  # every breaking change that did not heal cost exactly one full run
    unexplained: list[RunRecord]
    heals: int
    healable: int

    @property
    def healed(self) -> list[ChangeOutcome]:
        return [c for c in self.broke if c.healed]


def layout_changes(records: list[RunRecord], by_task: dict[str, list[RunRecord]]) -> LayoutChanges:
    changes = changes_of(records)
    broke = [c for c in changes if c.broke]
    per_change = [c.full_runs for c in broke if not c.healed]
    exact = all(n == 1 for n in per_change)
    # Full runs after the first other than the one fallback each breaking change costs.
    explained = {(c.task_id, c.before_run) for c in broke if not c.healed}
    after_first = [r for r in records if r.run > 1]
    unexplained = [r for r in after_first if r.full and (r.task_id, r.run) not in explained]
    heals = healable = 0
    for task_rows in by_task.values():
        for r, nxt in itertools.pairwise(task_rows):
            if r.fell_back:
                healable += 1
                heals += nxt.replayed
    return LayoutChanges(changes, broke, per_change, exact, unexplained, heals, healable)


def month_totals(
    tasks: list[CorpusTask], by_task: dict[str, list[RunRecord]], changes: list[ChangeOutcome]
) -> tuple[float, float]:
    """The projected month, rote and always-full, summed over the tasks."""
    month_rote = month_full = 0.0
    for t in tasks:
        rote, full = project_month(t, by_task[t.task_id], changes)
        month_rote += rote
        month_full += full
    return month_rote, month_full


def _metrics(
    records: list[RunRecord],
    rows: list[dict[str, Any]],
    moved: LayoutChanges,
    month: tuple[float, float],
) -> list[Metric]:
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
    rote_total = sum(r.cost_usd for r in records)
    full_total = sum(r.baseline_cost_usd for r in records)
    month_rote, month_full = month
    month_share = month_rote / month_full if month_full else float("nan")
    replay_ms = [float(r.duration_ms) for r in replays if r.duration_ms is not None]
    full_ms = [float(r.baseline_duration_ms) for r in records if r.baseline_duration_ms]
    per_change, broke, healed = moved.per_change, moved.broke, moved.healed
    healed_share = len(healed) / len(broke) if broke else float("nan")
    meeting = [c.cost_share for c in broke if c.cost_share is not None]
    meeting_share = _median(meeting)
    return [
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
        Metric("breaking layout changes healed in place (no full run)",
               round(healed_share * 100, 2), "%", f">= {TARGET_HEALED_SHARE * 100:g} %",
               bool(broke) and healed_share >= TARGET_HEALED_SHARE),
        Metric("median cost of the run meeting a breaking change / full run",
               round(meeting_share * 100, 3), "%", f"<= {TARGET_MEETING_SHARE * 100:g} %",
               bool(meeting) and meeting_share <= TARGET_MEETING_SHARE),
        Metric("full runs per breaking change that did not heal",
               round(_mean([float(n) for n in per_change]), 3) if per_change else 0.0, "runs",
               "exactly 1 each", moved.exact),
        Metric("layout changes that broke the executor", len(broke), "changes"),
        Metric("layout changes replays survived", len(moved.changes) - len(broke), "changes"),
        Metric("other full runs after the first", len(moved.unexplained), "runs"),
        Metric("hit rate (replayed / runs after the first)",
               _pct(len(replays), len(after_first), 2), "%"),
        Metric("runs after a fallback that replayed the new version",
               _pct(moved.heals, moved.healable, 2), "%"),
        Metric("total cost rote / always-full", _pct(rote_total, full_total), "%"),
        Metric("projected month rote / always-full (hourly, weekly redesign)",
               round(month_share * 100, 3), "%", f"<= {TARGET_MONTH_SHARE * 100:g} %",
               month_share <= TARGET_MONTH_SHARE),
        Metric("projected month, rote", round(month_rote, 4), "USD"),
        Metric("projected month, always-full", round(month_full, 4), "USD"),
        Metric("replay run duration p50", _median(replay_ms), "ms"),
        Metric("full run duration p50", _median(full_ms), "ms"),
    ]  # fmt: skip


def _notes(tasks: list[CorpusTask], records: list[RunRecord], quick: bool) -> str:
    return (
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


def _totals(records: list[RunRecord]) -> dict[str, Any]:
    """How many runs of each kind, what they cost, and how the full runs compare."""
    # The stand-in is deterministic: a rote full loop and the baseline on the same page
    # state must be the same conversation (what lets quick mode skip such baselines).
    twins = [r for r in records if r.full_loop_cost_usd is not None and r.baseline_kind == "run"]
    same = [
        r
        for r in twins
        if abs((r.full_loop_cost_usd or 0.0) - r.baseline_cost_usd) < 1e-9
        and r.result == r.baseline_result
    ]
    return {
        "rote_runs": len(records),
        "baseline_runs": sum(r.baseline_kind == "run" for r in records),
        "baseline_runs_completed": sum(
            r.baseline_kind == "run" and r.baseline_status == "completed" for r in records
        ),
        "rote_total_usd": round(sum(r.cost_usd for r in records), 6),
        "always_full_total_usd": round(sum(r.baseline_cost_usd for r in records), 6),
        "full_loops_equal_to_baseline": f"{len(same)}/{len(twins)}",
        "full_run_answers_as_oracle_expects": (
            f"{sum(r.oracle_agrees for r in records)}/{len(records)}"
        ),
    }


def _findings(records: list[RunRecord], moved: LayoutChanges) -> dict[str, Any]:
    """What went other than planned: answers the oracle did not expect, changes that did
    not do what the corpus says, full runs no change explains, broken replays, disagreements."""
    unexpected = [
        f"{c.task_id} before run {c.before_run}: {'broke' if c.broke else 'survived'}, the "
        f"corpus expects it to {'break' if TASKS_BY_ID[c.task_id].breaks else 'survive'}"
        for c in moved.changes
        if c.broke != TASKS_BY_ID[c.task_id].breaks
    ]
    return {
        "oracle_mismatches": [
            {"task": r.task_id, "run": r.run, "full": r.baseline_result}
            for r in records
            if not r.oracle_agrees
        ],
        "changes": [asdict(c) for c in moved.changes],
        "changes_not_as_corpus_expects": unexpected,
        "unexplained_full_runs": [
            {"task": r.task_id, "run": r.run, "compiled": r.compiled} for r in moved.unexplained
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
    }


def _run_rows(records: list[RunRecord]) -> list[dict[str, Any]]:
    return [
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
    ]


def summarise(
    tasks: list[CorpusTask], records: list[RunRecord], duration_s: float, quick: bool
) -> Section:
    by_task = {t.task_id: [r for r in records if r.task_id == t.task_id] for t in tasks}
    rows = [task_row(t, by_task[t.task_id]) for t in tasks]
    moved = layout_changes(records, by_task)
    month = month_totals(tasks, by_task, moved.changes)
    return Section(
        name="cost",
        metrics=_metrics(records, rows, moved, month),
        notes=_notes(tasks, records, quick),
        details={
            "duration_s": round(duration_s, 1),
            "quick": quick,
            "tasks": rows,
            **_totals(records),
            **_findings(records, moved),
            "runs": _run_rows(records),
        },
    )
