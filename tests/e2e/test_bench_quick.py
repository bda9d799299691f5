"""`rote bench --quick` runs every section and writes one JSON document with all of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import measured

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SECTIONS = {
    "cost",
    "drift",
    "overhead",
    "journal",
    "throughput",
    "executor_health",
    "browser_acquire",
}


def test_quick_bench_has_every_section(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "bench", "--quick", "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["quick"] is True and document["duration_s"] > 0
    # --quick is the CI smoke mode, meant to stay under 2 minutes: the document says
    # whether it did (timing itself is not asserted; a busy machine is slower).
    assert document["duration_target_s"] == 120
    assert document["duration_ok"] == (document["duration_s"] < 120)
    assert "--quick target: under 120 s" in done.stdout
    assert document["machine"]["cpus"] >= 1
    # The result names the code it measured (this test runs from a git checkout).
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", document["machine"]["commit"] or "")
    assert set(document["sections"]) == SECTIONS
    for name, section in document["sections"].items():
        assert section["metrics"], name
        assert all(measured(m) for m in section["metrics"]), name
    # The cost targets compare a replay with a full run on the same page state, both
    # through the stand-in model: ratios that do not depend on the machine, so even the
    # quick run must meet them. The other targets are times; only a full run on a quiet
    # machine says whether they hold (services/dev/bench/results/full.json).
    cost = document["sections"]["cost"]["metrics"]
    targeted = [m for m in cost if m["target"] is not None]
    assert len(targeted) >= 4
    assert all(m["ok"] is True for m in targeted), targeted
    # The drift section: silent drifts are caught and no wrong answer is delivered (ratios
    # through the stand-in, so the quick run must meet them), and the measure is sound:
    # every always-full run answered as the page's data says.
    drift = {m["name"]: m for m in document["sections"]["drift"]["metrics"]}
    caught = drift["silent drifts caught before a wrong answer"]
    wrong = drift["wrong answers delivered / replays"]
    assert (caught["target"], wrong["target"]) == (">= 95 %", "<= 1 %")
    assert caught["ok"] is True and wrong["ok"] is True, (caught, wrong)
    assert drift["always-full answers as the truth says (the measure is sound)"]["ok"] is True
    # The table a person reads names every section too.
    for name in SECTIONS:
        assert name in done.stdout


def test_without_output_stdout_is_the_json_alone(tmp_path: Path) -> None:
    """`rote bench | jq`: the table and the summary go to stderr, not into the JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
    env["ROTE_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "bench", "--quick", "--only", "executor_health"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert set(document["sections"]) == {"executor_health"}
    assert "speed-up from snapshots" in done.stderr and "1 sections in" in done.stderr
