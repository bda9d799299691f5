"""The benchmarks' README quotes the committed drift run (services/dev/bench/results/
drift.json): each number it takes from that run is checked against the JSON, so a re-run
cannot leave an old number behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "services/dev/bench/results/drift.json"
QUOTING = ROOT / "services/dev/bench/README.md"


def _document() -> dict[str, Any]:
    return json.loads(RESULT.read_text())


def _readme() -> str:
    return " ".join(QUOTING.read_text().split())


def test_the_committed_drift_run_is_a_full_run_that_met_its_targets() -> None:
    document = _document()
    assert document["quick"] is False and document["ok"] is True
    assert set(document["sections"]) == {"drift"}
    assert document["machine"]["commit"] and not document["machine"]["commit"].endswith("dirty")


def test_every_number_the_readme_quotes_is_the_runs() -> None:
    document = _document()
    section = document["sections"]["drift"]
    m = {metric["name"]: metric["value"] for metric in section["metrics"]}
    runs = section["details"]["runs"]
    replays = [r for r in runs if r["source"] == "executor"]
    attempts = [r for r in runs if r["replayed_v"] is not None]
    clean = [r for r in attempts if r["clean"]]
    checks = [r["verification"] for r in attempts if r["verification"]["method"]]
    withheld = [r for r in attempts if r["withheld_right"] is not None]
    events = int(m["silent drift events"])
    flagged_first = sum(k["flagged"] for k in section["details"]["kinds"])
    caught = m["silent drifts caught before a wrong answer"]
    alarms = sum(r["withheld_right"] is True or (r["verification"]["raised"] and r["right"])
                 for r in clean)  # fmt: skip
    quotes = [
        f"{document['duration_s']:.0f} s on the same VM, loaded, at commit "
        f"{document['machine']['commit'][:7]}",
        f"| silent drifts caught before a wrong answer | {caught:g}% "
        f"({events} of {events}, every one flagged on its first run) |",
        f"| wrong answers delivered / replays | {m['wrong answers delivered / replays']:g}% "
        f"(0 of {len(replays)}) |",
        f"| verification cost per replay / full run | "
        f"{m['verification cost per replay / full run']:.2f}% "
        f"({sum(c['method'] == 'small_model' for c in checks)} small-model checks, "
        f"{sum(c['method'] == 'shadow' for c in checks)} shadow) |",
        f"| median replay cost / full run | {m['median replay cost / full run']:.2f}%",
        f"| false alarms on clean replays | {m['false alarms on clean replays']:.2f}% "
        f"({alarms} of {len(clean)}) |",
        f"{int(m['replays flagged'])} replays were flagged",
        f"checks withheld {len(withheld)} answers, "
        f"{sum(r['withheld_right'] is False for r in withheld)} of them wrong",
        f"The {sum(bool(r['withheld_right']) for r in withheld)} right answers withheld",
    ]
    assert flagged_first == events
    readme = _readme()
    missing = [quote for quote in quotes if quote not in readme]
    assert missing == []
