"""The benchmarks' README (services/dev/bench/README.md) quotes the committed full run:
every number it takes from that run's JSON is checked against the JSON, so a re-run
cannot leave an old number behind."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from services.dev.bench.corpus.tasks import TASKS_BY_ID
from services.dev.bench.harness import percentile, quartiles

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "services/dev/bench/results/full.json"
QUOTING = ROOT / "services/dev/bench/README.md"
TIMES = "\N{MULTIPLICATION SIGN}"  # as the README writes ratios
TO = "\N{EN DASH}"  # and ranges
WORST = "cost/worst task's median replay / full"
# The overhead section's target metric: before and since a step's cost is the slope
# between two replay lengths. The committed run may predate the change (see _overhead).
RATIO = "overhead/replay step slope / raw round trip (median of rounds)"


def _document() -> dict[str, Any]:
    return json.loads(RESULT.read_text())


def _metrics(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{section}/{metric['name']}": metric
        for section, body in document["sections"].items()
        for metric in body["metrics"]
    }


def _readme() -> str:
    """The bench README with every run of whitespace as one space: a quote may wrap lines."""
    return " ".join(QUOTING.read_text().split())


def _target(metric: dict[str, Any]) -> str:
    """A metric's target as the README's results table writes it ("<= 2", unit x -> "≤ 2" TIMES)."""
    text = metric["target"].replace("<=", "≤").replace(">=", "≥").replace(" %", "%")
    return text.removesuffix(" each") + (TIMES if metric["unit"] == "x" else "")


def test_the_committed_full_run_is_a_full_run_that_met_its_targets() -> None:
    document = _document()
    assert document["quick"] is False
    assert document["ok"] is True
    assert set(document["sections"]) == {
        "cost", "overhead", "throughput", "executor_health", "browser_acquire",
    }  # fmt: skip
    assert document["machine"]["commit"] and not document["machine"]["commit"].endswith("dirty")


def _run_quotes(document: dict[str, Any]) -> list[str]:
    machine = document["machine"]
    return [
        f"{document['duration_s']:.0f} s on a {machine['cpus']}-CPU {machine['cpu_model']} "
        f"{machine['machine']} {machine['platform'].split('-')[0]} VM with "
        f"{machine['memory_gb']:g} GB, Python {machine['python']}, at commit "
        f"{machine['commit'][:7]};"
    ]


def _cost_quotes(document: dict[str, Any], m: dict[str, dict[str, Any]]) -> list[str]:
    details = document["sections"]["cost"]["details"]
    tasks = details["tasks"]
    sites = {TASKS_BY_ID[row["task"]].site for row in tasks}
    runs_each = {row["runs"] for row in tasks}
    assert len(runs_each) == 1, f"tasks ran different numbers of runs: {runs_each}"
    replays = sum(row["replays"] for row in tasks)
    assert replays == sum(r["source"] == "executor" for r in details["runs"])

    def v(name: str) -> float:
        return m[f"cost/{name}"]["value"]

    def target(name: str) -> str:
        return _target(m[f"cost/{name}"])

    median = "median replay cost / full run cost"
    agreement = "answer agreement, replay vs full run on the same page"
    per_change = "full runs per breaking layout change"
    month = "projected month rote / always-full (hourly, weekly redesign)"
    return [
        f"| cost | {len(tasks)} recurring tasks over {len(sites)} local sites, "
        f"{runs_each.pop()} runs each,",
        f"| {v(median):.2f}% (worst task {m[WORST]['value']:.1f}%) | {target(median)} |",
        f"| {v(agreement):.0f}% ({replays} replays) | {target(agreement)} |",
        f"| {v(per_change):.1f} ({v('layout changes that broke the executor'):.0f} breaking "
        f"changes; {v('layout changes replays survived'):.0f} did not break) | "
        f"{target(per_change)} |",
        f"| {v('hit rate (replayed / runs after the first)'):.0f}% / "
        f"{v('heal rate (replayed the run after a break)'):.0f}% |",
        f"(these {details['rote_runs']} runs) | {v('total cost rote / always-full'):.1f}% |",
        f"| {v(month):.2f}% (${v('projected month, rote'):.2f} vs "
        f"${v('projected month, always-full'):.1f}) | {target(month)} |",
    ]


def _overhead(document: dict[str, Any], m: dict[str, dict[str, Any]]) -> list[str]:
    """The overhead row: the slope ratio, and the quartiles and rounds above 2, which
    must be what the stated method gives from the rounds' ratios."""
    details = document["sections"]["overhead"]["details"]
    ratios = details["ratios"]
    q1, _, q3 = quartiles(ratios)
    above = sum(r > 2 for r in ratios)
    ratio = m[RATIO]
    assert details["rounds"] == len(ratios)
    assert m["overhead/rounds' ratio, 1st quartile"]["value"] == q1
    assert m["overhead/rounds' ratio, 3rd quartile"]["value"] == q3
    assert m["overhead/rounds with ratio above 2"]["value"] == above
    short, long = details["steps"]
    slope = m["overhead/replay cost per step (slope), median of rounds"]["value"]
    fixed = m["overhead/replay fixed cost per replay (intercept), median of rounds"]["value"]
    raw = m["overhead/raw nats request/reply p50"]["value"]
    return [
        f"replays of {short} and {long} steps",
        f"(median of {len(ratios)} rounds) | {ratio['value']:.2f}{TIMES} (rounds' quartiles "
        f"{q1:.2f}{TO}{q3:.2f}; {above} of {len(ratios)} rounds above 2; a step {slope:.0f} µs, "
        f"a round trip {raw:.0f} µs, {fixed:.1f} ms fixed per replay) | {_target(ratio)} |",
    ]


def _other_quotes(m: dict[str, dict[str, Any]]) -> list[str]:
    def v(name: str) -> float:
        return m[name]["value"]

    one = "throughput/replayed runs/s, 1 runner process"
    snapshots = "executor_health/rebuild 10000 events, with snapshots"
    pooled = "browser_acquire/pooled acquire p50"
    return [
        f"| {v(one):.0f} / {v('throughput/replayed runs/s, 2 runner processes'):.0f} "
        f"({v('throughput/scaling 2 processes / 1'):.2f}{TIMES}) | {_target(m[one])} |",
        f"| {v(snapshots):.1f} ms / "
        f"{v('executor_health/rebuild 10000 events, no snapshots'):.0f} ms | "
        f"{_target(m[snapshots])} |",
        f"| {v(pooled):.1f} ms / {v('browser_acquire/fresh acquire p50'):.0f} ms | "
        f"{_target(m[pooled])} |",
    ]


def test_the_readme_quotes_the_committed_numbers() -> None:
    document = _document()
    m = _metrics(document)
    readme = _readme()
    quoted = [
        *_run_quotes(document),
        *_cost_quotes(document, m),
        *_overhead(document, m),
        *_other_quotes(m),
    ]
    missing = [text for text in quoted if text not in readme]
    assert missing == []


def test_percentiles_run_from_the_least_to_the_greatest_value() -> None:
    values = [float(v) for v in range(1, 201)]
    assert (percentile(values, 0), percentile(values, 100)) == (1.0, 200.0)
    assert percentile(values, 50) == statistics.median(values)
    assert percentile([3.0], 95) == 3.0
