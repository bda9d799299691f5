"""Silent drift (services/executor/drift.py): what a replay's read fingerprint must and
must not flag against the one recorded at compile time."""

from __future__ import annotations

from contracts.tools import Fingerprint
from services.executor.drift import compare, date_spread, masked


def forecast(**changes: object) -> Fingerprint:
    """A weather table read: city and high columns, a unit note, the page's dates."""
    base: dict[str, object] = {
        "lang": "en-US",
        "notes": ["Today is 2025-03-05.", "Updated 2025-03-05 06:00.", "Temperatures in °F."],
        "headers": ["City", "Sky", "High", "Low"],
        "labels": {"city": ["City", "City"], "high": ["High", "High"]},
        "struck": {"city": [False, False], "high": [False, False]},
        "paths": {"city": "table>tbody>tr>td", "high": "table>tbody>tr>td"},
        "shapes": {"city": ["text"], "high": ["9"]},
    }
    base.update(changes)
    return Fingerprint(**base)  # type: ignore[arg-type]


def test_the_same_page_with_new_data_means_the_same() -> None:
    notes = ["Today is 2025-03-06.", "Updated 2025-03-06 06:00.", "Temperatures in °F."]
    today = forecast(notes=notes)
    assert compare(forecast(), today) == []
    assert compare(forecast(), forecast()) == []


def test_each_change_of_meaning_is_named() -> None:
    celsius = ["Today is 2025-03-05.", "Updated 2025-03-05 06:00.", "Temperatures in °C."]
    stale = ["Today is 2025-03-12.", "Updated 2025-03-05 06:00.", "Temperatures in °F."]
    cases = {
        "language": forecast(lang="pt-PT"),
        "headers": forecast(headers=["City", "Sky", "Low", "High"]),
        "label": forecast(labels={"city": ["City", "City"], "high": ["Low", "Low"]}),
        "note": forecast(notes=celsius),
        "stale": forecast(notes=stale),
        "struck": forecast(struck={"city": [False, False], "high": [True, False]}),
        "path": forecast(paths={"city": "table>tbody>tr>td", "high": "table>tbody>tr>td>s"}),
        "shape": forecast(shapes={"city": ["text"], "high": ["9 °a"]}),
    }  # fmt: skip
    said = {kind: compare(forecast(), now) for kind, now in cases.items()}
    assert all(said.values()), {k: v for k, v in said.items() if not v}
    assert "language" in said["language"][0]
    assert "'high'" in said["label"][0] and "'Low'" in said["label"][0]
    assert any("°C" in r for r in said["note"]) and any("°F" in r for r in said["note"])
    assert said["stale"] == ["the page's dates are now 7 days apart (were 0)"]
    assert "struck" in said["struck"][0]


def test_a_label_is_compared_item_by_item() -> None:
    """A page of labelled values: two labels trading places is a change, in order."""
    before = Fingerprint(labels={"": ["Weight", "Width", "Height"]})
    swapped = Fingerprint(labels={"": ["Width", "Weight", "Height"]})
    longer = Fingerprint(labels={"": ["Weight", "Width", "Height", "Depth"]})
    assert compare(before, swapped) == ["the value read: item 0's label was 'Weight', now 'Width'"]
    assert compare(before, longer) == []


def test_figures_are_masked_and_dates_spread_only_when_two_show() -> None:
    assert masked("Updated  2025-03-05 06:00.") == "Updated #-#-# #:#."
    assert date_spread(["Today is 2025-03-05."]) is None
    assert date_spread(["2025-03-05", "Updated 2025-02-26"]) == 7
