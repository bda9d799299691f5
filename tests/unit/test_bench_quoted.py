"""The README quotes the committed full benchmark run: its numbers, not older ones."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORST = "cost/worst task's median replay / full"
TIMES = "\N{MULTIPLICATION SIGN}"  # as the README writes ratios


def _metrics() -> tuple[dict[str, object], dict[str, float]]:
    document = json.loads((ROOT / "tests/bench/results/full.json").read_text())
    values = {
        f"{section}/{metric['name']}": metric["value"]
        for section, body in document["sections"].items()
        for metric in body["metrics"]
    }
    return document, values


def test_the_committed_full_run_is_a_full_run_that_met_its_targets() -> None:
    document, _ = _metrics()
    assert document["quick"] is False
    assert document["ok"] is True
    assert set(document["sections"]) == {
        "cost", "overhead", "throughput", "executor_health", "browser_acquire",
    }  # fmt: skip
    assert document["machine"]["commit"] and not document["machine"]["commit"].endswith("dirty")


def test_the_readme_quotes_the_committed_numbers() -> None:
    document, v = _metrics()
    readme = (ROOT / "README.md").read_text()
    quoted = [
        f"{document['duration_s']:.0f} s on a",
        f"at commit {document['machine']['commit'][:7]}",
        f"| {v['cost/median replay cost / full run cost']:.2f}% (worst task {v[WORST]:.1f}%)",
        f"| {v['cost/answer agreement, replay vs full run on the same page']:.0f}% (",
        f"{v['cost/layout changes that broke the executor']:.0f} breaking changes; "
        f"{v['cost/layout changes replays survived']:.0f} did not break",
        f"| {v['cost/total cost rote / always-full']:.1f}% |",
        f"| {v['cost/projected month rote / always-full (hourly, weekly redesign)']:.2f}% "
        f"(${v['cost/projected month, rote']:.2f} vs "
        f"${v['cost/projected month, always-full']:.1f})",
        f"| {v['overhead/replayed step / raw round trip (median of rounds)']:.2f}{TIMES} (",
        f"| {v['throughput/replayed runs/s, 1 runner process']:.0f} / "
        f"{v['throughput/replayed runs/s, 2 runner processes']:.0f} "
        f"({v['throughput/scaling 2 processes / 1']:.2f}{TIMES})",
        f"| {v['executor_health/rebuild 10000 events, with snapshots']:.1f} ms / "
        f"{v['executor_health/rebuild 10000 events, no snapshots']:.0f} ms |",
        f"| {v['browser_acquire/pooled acquire p50']:.1f} ms / "
        f"{v['browser_acquire/fresh acquire p50']:.0f} ms |",
    ]
    missing = [text for text in quoted if text not in readme]
    assert missing == []
