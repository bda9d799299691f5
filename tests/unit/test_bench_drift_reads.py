"""A drift page's reads with their fingerprints (services/dev/bench/drift/reads.py): the
notes around what was read, the table's headers, each value's label, struck values."""

from __future__ import annotations

from services.dev.bench.drift.oracle import extract
from services.dev.bench.drift.reads import fingerprint_of, page_doc, page_reads
from services.dev.bench.drift.state import Layout, PageState
from services.dev.bench.drift.tasks import TASKS_BY_ID

ROWS = {"city": "td:nth-child(1)", "high": "td:nth-child(3)"}


def test_a_table_read_has_its_notes_headers_and_each_values_column_label() -> None:
    task = TASKS_BY_ID["weather-high-lisbon"]
    doc = page_doc(task, PageState(2))
    found = fingerprint_of(doc, {"selector": "table tbody tr", "fields": ROWS})
    assert found.lang == "en-US"
    assert found.notes == [
        "Today is 2025-03-05.",
        "Forecast",
        "Temperatures in °F.",
        "Updated 2025-03-05 06:00.",
    ]  # not the navigation, not the footer
    assert found.headers == ["City", "Sky", "High (°F)", "Low (°F)", "Rain"]
    assert found.labels == {"city": ["City"] * 8, "high": ["High (°F)"] * 8}
    assert found.struck == {}
    # The same cells after the columns traded places: their labels say so.
    moved = page_doc(task, PageState(2, drifts=frozenset({"columns_reordered"})))
    labels = fingerprint_of(moved, {"selector": "table tbody tr", "fields": ROWS}).labels
    assert labels["high"] == ["Low (°F)"] * 8


def test_a_grid_read_is_labelled_by_its_head_and_a_struck_price_is_marked() -> None:
    task = TASKS_BY_ID["market-mug-price"]
    state = PageState(3, "v2", frozenset({"struck_price", "discontinued"}))
    doc = page_doc(task, state)
    fields = {"product": "span:nth-child(1)", "price": "span:nth-child(2)"}
    found = fingerprint_of(doc, {"selector": ".grid .row", "fields": fields})
    assert found.headers == ["Product", "Price (USD)", "Stock", "Sale price (USD)"]
    assert found.labels["price"] == ["Price (USD)"] * 8
    items = extract(doc, {"selector": ".grid .row", "fields": fields})
    mug = next(i for i, row in enumerate(items) if row["product"] == "Travel Mug")
    assert [i for i, struck in enumerate(found.struck["price"]) if struck] == [mug]
    assert "* Discontinued: no longer sold." in found.notes


def test_labelled_values_are_labelled_by_their_term_or_their_paired_key() -> None:
    task = TASKS_BY_ID["specs-board-width"]
    shapes: list[tuple[Layout, str]] = [("v1", "dl dd"), ("v2", "ul.values li")]
    for layout, values in shapes:
        swapped = PageState(2, layout, frozenset({"label_value_swapped"}))
        found = fingerprint_of(page_doc(task, swapped), {"selector": values})
        assert found.labels == {"": ["Width (cm)", "Weight (kg)", "Capacity (l)", "Height (cm)"]}
        assert found.headers == []


def test_a_ranked_list_has_its_order_caption_and_no_labels() -> None:
    task = TASKS_BY_ID["news-newest"]
    reads = page_reads(
        task, PageState(2, drifts=frozenset({"sort_reversed"})), [{"selector": ".headline"}]
    )
    [read] = reads
    assert read.fingerprint is not None and read.fingerprint.labels == {}
    assert "Oldest first." in read.fingerprint.notes
    assert len(read.output) == 8 and read.selector == ".headline"
    with_text = page_reads(task, PageState(2), [{"selector": ".headline"}], text=True)
    assert with_text[0].tool == "browser_read_page" and "Newest first." in with_text[0].output
