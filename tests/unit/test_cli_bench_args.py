"""`rote bench --only` takes the section names the table and the JSON show, too; the
JSON is strict."""

from __future__ import annotations

import json
import math

import pytest

from services.cli import build_parser
from services.cli.bench import SECTIONS, section_names
from services.dev.bench.harness import Metric, Section, section_from_json, to_json


@pytest.mark.parametrize(
    ("given", "runs"),
    [
        (["executor_health"], ["health"]),
        (["browser_acquire", "cost"], ["browser", "cost"]),
        (["health", "executor_health"], ["health"]),  # one section, run once
        (None, SECTIONS),
    ],
)
def test_only_accepts_the_reported_section_names(given: list[str] | None, runs: list[str]) -> None:
    if given is not None:
        assert build_parser().parse_args(["bench", "--only", *given]).only == given
    assert section_names(given) == runs


def test_an_unknown_section_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--only", "speed"])


def _refuse(constant: str) -> None:
    raise ValueError(f"not JSON: {constant}")


def test_a_metric_that_could_not_be_measured_is_null_in_strict_json() -> None:
    """No replay broke, so no heal rate: a bare NaN would make jq or JSON.parse refuse
    the whole document."""
    section = Section(
        "cost",
        [Metric("heal rate", float("nan"), "%"), Metric("agreement", 100.0, "%", ">= 99%", True)],
        details={"worst": float("inf"), "runs": [1.5, float("nan")]},
    )
    document = json.loads(to_json([section], 1.0, quick=True), parse_constant=_refuse)
    read = document["sections"]["cost"]
    assert [m["value"] for m in read["metrics"]] == [None, 100.0]
    assert read["details"] == {"worst": None, "runs": [1.5, None]}
    back = section_from_json(read)
    assert math.isnan(back.metrics[0].value) and back.metrics[1].value == 100.0
    assert back.ok
