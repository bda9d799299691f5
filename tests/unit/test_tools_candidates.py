"""browser_candidates without a browser: its output fitted by whole candidates, its
in-page scripts assembled, and its place among the tool kinds (a read, never an action).
What it finds on pages: tests/integration/test_tools_candidates.py."""

from __future__ import annotations

import msgspec

from contracts.tools import Candidate, Candidates
from services.executor.toolkinds import acts, is_read, navigates, safe_to_retry, value_kind
from services.tools.accessible import TARGET_JS
from services.tools.candidates import ACT_JS, fit
from services.tools.groups import READ_JS


def test_candidates_are_dropped_whole_to_fit() -> None:
    found = Candidates(
        url="http://x.test/",
        title="X",
        candidates=[
            Candidate(selector=f"ul > li:nth-of-type({i})", samples=["y" * 80]) for i in range(100)
        ],
    )
    size = len(msgspec.json.encode(found))
    assert fit(found, size) is found
    fitted = fit(found, size // 2)
    assert fitted.truncated
    assert len(msgspec.json.encode(fitted)) <= size // 2
    kept = len(fitted.candidates)
    assert 0 < kept < 100
    # The first ones, untouched: a selector cut short would select something else.
    assert fitted.candidates == found.candidates[:kept]


def test_the_scripts_are_assembled() -> None:
    for script in (ACT_JS, READ_JS, TARGET_JS):
        for placeholder in ("ACCESSIBLE_JS", "CSS_PATHS_JS", "__TEXT_CHARS__"):
            assert placeholder not in script


def test_it_is_a_read_that_never_acts() -> None:
    tool = "browser_candidates"
    assert is_read(tool) and not acts(tool) and not navigates(tool)
    assert safe_to_retry(tool, "timeout")
    assert value_kind(tool, ("purpose",)) == value_kind(tool, ("limit",)) == "structure"
