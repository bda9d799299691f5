"""The drift benchmark's numbers: from the run records, the silent drifts caught before a
wrong answer was delivered, the wrong answers replays delivered, what verification cost,
what a replay cost, and the alarms clean replays raised.

A silent drift's *window* is its first run and the runs after it on the same page state
kind (same drifts, same layout): the drift is caught when no run in its window delivered
a wrong answer (a replay that broke and fell back to a full run, a replay flagged and
run in full, and a replay that happened to be right all deliver right answers). A clean
replay is one on a page that means what the page its version was compiled on meant.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from services.dev.bench.drift.state import DRIFT_KINDS
from services.dev.bench.drift.tasks import DriftTask
from services.dev.bench.drift_runs import DriftRecord
from services.dev.bench.harness import Metric, Section

TARGET_CAUGHT = 0.95
TARGET_WRONG = 0.01
TARGET_VERIFICATION = 0.05
TARGET_REPLAY_SHARE = 0.01


def _pct(part: float, whole: float, digits: int = 2) -> float:
    return round(part / whole * 100, digits) if whole else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def windows(records: list[DriftRecord]) -> list[list[DriftRecord]]:
    """Each silent drift's runs: its onset and the runs after it on the same state kind."""
    out = []
    by_task: dict[str, list[DriftRecord]] = {}
    for r in records:
        by_task.setdefault(r.task_id, []).append(r)
    for rows in by_task.values():
        for i, first in enumerate(rows):
            if first.onset is None:
                continue
            window = [first]
            for later in rows[i + 1 :]:
                if later.onset or later.broke or later.drifts != first.drifts:
                    break
                window.append(later)
            out.append(window)
    return out


def outcome(first: DriftRecord) -> str:
    """What rote did on a drift's first run."""
    if first.verification.flagged:
        return "flagged"
    if first.replay_version is None:
        return "full"  # no executor to replay (not compiled)
    if first.replay_ok is False:
        return "broke"
    return "right" if first.right else "wrong"


def kinds_table(drift_windows: list[list[DriftRecord]]) -> list[dict[str, Any]]:
    rows = []
    for kind in DRIFT_KINDS:
        mine = [w for w in drift_windows if w[0].onset == kind]
        outcomes = [outcome(w[0]) for w in mine]
        rows.append(
            {
                "kind": kind,
                "events": len(mine),
                "caught": sum(not any(r.delivered_wrong for r in w) for w in mine),
                **{o: outcomes.count(o) for o in ("broke", "flagged", "right", "wrong", "full")},
                "wrong_answers": sum(r.delivered_wrong for w in mine for r in w),
            }
        )
    return rows


def _metrics(records: list[DriftRecord], drift_windows: list[list[DriftRecord]]) -> list[Metric]:
    replays = [r for r in records if r.replayed]
    wrong_replays = [r for r in replays if not r.right]
    caught = [w for w in drift_windows if not any(r.delivered_wrong for r in w)]
    caught_share = len(caught) / len(drift_windows) if drift_windows else float("nan")
    wrong_share = len(wrong_replays) / len(replays) if replays else float("nan")
    full = [r.baseline_cost_usd for r in replays]
    verification = statistics.fmean(
        [r.verification.cost_usd / f for r, f in zip(replays, full, strict=True) if f > 0]
        or [float("nan")]
    )
    median_replay = _median([r.cost_usd / f for r, f in zip(replays, full, strict=True) if f > 0])
    attempts = [r for r in records if r.replay_version is not None]
    clean = [r for r in attempts if r.clean]
    # A flag, or a check that withheld an answer, on a clean page where the answer was
    # right: needless. A withheld answer that was wrong was a catch, not an alarm.
    alarms = [r for r in clean if r.needless_alarm]
    baseline_right = sum(r.baseline_right for r in records)
    return [
        Metric("silent drifts caught before a wrong answer", _pct(len(caught), len(drift_windows)),
               "%", f">= {TARGET_CAUGHT * 100:g} %",
               bool(drift_windows) and caught_share >= TARGET_CAUGHT),
        Metric("wrong answers delivered / replays", _pct(len(wrong_replays), len(replays)), "%",
               f"<= {TARGET_WRONG * 100:g} %", bool(replays) and wrong_share <= TARGET_WRONG),
        Metric("verification cost per replay / full run", round(verification * 100, 4), "%",
               f"<= {TARGET_VERIFICATION * 100:g} %", verification <= TARGET_VERIFICATION),
        Metric("median replay cost / full run", round(median_replay * 100, 4), "%",
               f"<= {TARGET_REPLAY_SHARE * 100:g} %", median_replay <= TARGET_REPLAY_SHARE),
        Metric("false alarms on clean replays", _pct(len(alarms), len(clean)), "%"),
        Metric("always-full answers as the truth says (the measure is sound)",
               _pct(baseline_right, len(records)), "%", "= 100 %",
               bool(records) and baseline_right == len(records)),
        Metric("silent drifts detected on their first run (broke or flagged)",
               _pct(sum(outcome(w[0]) in ("broke", "flagged") for w in drift_windows),
                    len(drift_windows)), "%"),
        Metric("silent drift events", len(drift_windows), "drifts"),
        Metric("replays", len(replays), "runs"),
        Metric("wrong answers delivered on drifted pages",
               sum(r.delivered_wrong and not r.clean for r in records), "runs"),
        Metric("wrong answers delivered on clean pages",
               sum(r.delivered_wrong and r.clean for r in records), "runs"),
        Metric("clean replays that broke", sum(r.replay_ok is False for r in clean), "runs"),
        Metric("replays flagged", sum(r.verification.flagged for r in attempts), "runs"),
        Metric("answers withheld by a check", sum(r.withheld_right is not None for r in attempts),
               "runs"),
        Metric("answers withheld that were right",
               sum(bool(r.withheld_right) for r in attempts), "runs"),
    ]  # fmt: skip


def _run_rows(records: list[DriftRecord]) -> list[dict[str, Any]]:
    return [
        {
            "task": r.task_id,
            "run": r.run,
            "layout": r.layout,
            "drifts": r.drifts,
            "onset": r.onset,
            "source": r.source,
            "replayed_v": r.replay_version,
            "replay_ok": r.replay_ok,
            "clean": r.clean,
            "right": r.right,
            "why": r.why,
            "result": r.result,
            "truth": r.truth,
            "full_right": r.baseline_right,
            "verification": asdict(r.verification),
            "withheld_right": r.withheld_right,
            "cost": r.cost_usd,
            "full_cost": r.baseline_cost_usd,
            "compiled": r.compiled,
        }
        for r in records
    ]


def _wrong(r: DriftRecord) -> dict[str, Any]:
    return {"task": r.task_id, "run": r.run, "drifts": r.drifts, "answer": r.result,
            "truth": r.truth, "why": r.why}  # fmt: skip


def summarise(
    tasks: list[DriftTask], records: list[DriftRecord], duration_s: float, quick: bool
) -> Section:
    drift_windows = windows(records)
    kinds = {w[0].onset for w in drift_windows}
    return Section(
        name="drift",
        metrics=_metrics(records, drift_windows),
        notes=(
            f"{len(tasks)} tasks x {len(records) // max(1, len(tasks))} runs on local sites; "
            f"{len(drift_windows)} silent drifts of {len(kinds)} kinds (a redesign that keeps "
            "every recorded selector matching but changes what the values mean), clean "
            f"editions{'' if quick else ' and breaking redesigns'} between them; each run "
            "measured twice on the same page state: rote and an always-full run, both "
            "answers judged against the truth computed from the site's data. 'Caught': no "
            "wrong answer delivered in the drift's window (the replay broke, was flagged, "
            "or was right)."
        ),
        details={
            "duration_s": round(duration_s, 1),
            "quick": quick,
            "kinds": kinds_table(drift_windows),
            "wrong_answers": [_wrong(r) for r in records if r.delivered_wrong],
            "always_full_wrong": [
                {"task": r.task_id, "run": r.run, "answer": r.baseline_result, "truth": r.truth}
                for r in records
                if not r.baseline_right
            ],
            "runs": _run_rows(records),
        },
    )
