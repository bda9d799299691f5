"""The cost section's account of layout changes (services/dev/bench/cost_summary.py): a
change that heals in place is a breaking change with no full run, costed at the run that
met it; one that falls back costs exactly one full run. From hand-made run records."""

from __future__ import annotations

from typing import Any

import pytest

from services.dev.bench.corpus.tasks import TASKS
from services.dev.bench.cost_runs import RunRecord
from services.dev.bench.cost_summary import changes_of, summarise

TASK = TASKS[0]


def record(run: int, source: str, **fields: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        task_id=TASK.task_id, kind=TASK.kind, run=run, layout="v1", edition=run - 1,
        changed=False, source=source, status="completed", fell_back=False, version=None,
        cost_usd=0.0001 if source == "executor" else 0.01, duration_ms=10,
        result="same", replay_failure=None, baseline_status="completed",
        baseline_cost_usd=0.01, baseline_duration_ms=10, baseline_result="same",
    )  # fmt: skip
    return RunRecord(**{**base, **fields})


def test_a_healed_change_breaks_with_no_full_run_and_a_fallback_costs_one() -> None:
    records = [
        record(1, "full_llm"),
        record(2, "executor"),
        # Redesign: met by a replay that healed a step, at 1% of the full run.
        record(3, "executor", layout="v2", changed=True, healed=1, cost_usd=0.0001),
        record(4, "executor", layout="v2"),
        # Another: no heal could bridge it; the run fell back to one full run.
        record(5, "full_llm", layout="v3", changed=True, fell_back=True, cost_usd=0.0102),
        record(6, "executor", layout="v3"),
    ]
    healed, fell = changes_of(records)
    assert (healed.broke, healed.healed, healed.full_runs) == (True, True, 0)
    assert healed.cost_share == pytest.approx(0.01)
    assert (fell.broke, fell.healed, fell.full_runs) == (True, False, 1)
    metrics = {m.name: m for m in summarise([TASK], records, 1.0, quick=False).metrics}
    share = metrics["breaking layout changes healed in place (no full run)"]
    assert (share.value, share.ok) == (50.0, False)  # 1 of 2: under the 80% target
    meeting = metrics["median cost of the run meeting a breaking change / full run"]
    assert meeting.value == pytest.approx((1.0 + 102.0) / 2)
    exact = metrics["full runs per breaking change that did not heal"]
    assert (exact.value, exact.ok) == (1.0, True)
    assert metrics["other full runs after the first"].value == 0
