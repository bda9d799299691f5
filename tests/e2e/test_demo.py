"""`rote demo` as a newcomer runs it: the scenario's sources and versions per run, a
summary whose numbers add up, exit 0, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.leftovers import MARK_VARIABLE, wait_gone

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_demo_walks_the_whole_life_of_a_task() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
    marker = uuid.uuid4().hex
    env[MARK_VARIABLE] = marker
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    summary = json.loads(out[out.index("\n{") + 1 :])
    runs = summary["runs"]

    assert [r["source"] for r in runs] == [
        "full_llm",
        "executor",
        "executor",
        "full_llm",
        "executor",
    ]
    assert [r["executor_version"] for r in runs] == [None, 1, 1, None, 2]
    assert [r["fell_back"] for r in runs] == [False, False, False, True, False]
    assert summary["versions"] == [1, 2]
    assert summary["full_runs_caused_by_site_change"] == 1
    for r in runs:
        assert r["status"] == "completed"
        assert r["result"].startswith("Top 3 headlines:\n1. ")
        if r["source"] == "executor":
            assert r["large_tokens"] == 0 and r["cost_usd"] == 0
            assert r["saved_usd"] > 0
        else:
            assert r["large_tokens"] > 0 and r["cost_usd"] > 0

    full = [r["cost_usd"] for r in runs if r["source"] == "full_llm"]
    total = sum(r["cost_usd"] for r in runs)
    assert summary["total_cost_usd"] == pytest.approx(total)
    assert summary["full_run_cost_usd"] == pytest.approx(sum(full) / len(full))
    assert summary["all_full_cost_usd"] == pytest.approx(5 * summary["full_run_cost_usd"])
    assert f"total cost ${total:.6f}" in out
    assert "the site change cost 1 full run(s)" in out
    # The executor ledger's savings are the replays' savings as their run events said.
    saved = sum(r["saved_usd"] for r in runs)
    assert "executor now v2 (active, replayed 1 time(s))" in out
    assert f"replays of every version saved ${saved:.6f}" in out
    assert "not Claude" in out  # the stand-in says what it is

    # Nothing left behind: no nats-server, Playwright driver or Chromium of the demo's.
    assert wait_gone(marker) == []


def test_demo_refuses_a_data_dir_that_holds_an_earlier_story(tmp_path: Path) -> None:
    (tmp_path / "events.sqlite").write_bytes(b"an earlier demo's store")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"--data-dir {tmp_path} is not empty" in done.stderr
    assert "Traceback" not in done.stderr
