"""`rote bench --only` takes the section names the table and the JSON show, too."""

from __future__ import annotations

import pytest

from services.cli import build_parser
from services.cli.bench import SECTIONS, section_names


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
