"""The parts of a browser_extract's drift fingerprint computed in Python: the shapes of
the values read (services/executor/drift.py), how the page's part is assembled
(services/tools/fingerprints.py), and that a secret a page shows never leaves the tools
service in a fingerprint."""

from __future__ import annotations

import msgspec
import pytest

from contracts.tools import Fingerprint, ToolMetadata, ToolResult
from services.executor.drift import MAX_SHAPES, value_shape, value_shapes
from services.kernel import secrets
from services.kernel.secrets import MASK
from services.tools.fingerprints import MAX_FINGERPRINT_FIELDS, fingerprint_of
from services.tools.masking import masked
from services.tools.vault import Vault


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("$34.00", "$9"),
        ("$1,234.50", "$9"),
        ("1.234,50", "9"),
        ("1 234,50", "9"),
        ("34,00 €", "9 €"),
        ("EUR 34.00", "a 9"),
        ("64 °F", "9 °a"),
        ("17.8 °C", "9 °a"),
        ("64°F", "9°a"),
        ("08:15", "9:9"),
        ("03/04/2025", "9/9/9"),
        ("2025-03-04", "9-9-9"),
        ("45%", "9%"),
        # A sign is part of the number: below zero is the same kind of value.
        ("-3", "9"),
        ("\u22124 °C", "9 °a"),
        ("from -3 to 5", "a 9 a 9"),
        ("IC 512", "a 9"),
        ("Q1", "a9"),
        ("3.4 kg", "9 a"),
        ("3,4 Kilogramm", "9 a"),
        ("١٢٣", "9"),  # digits of another script
        ("34,00\u00a0€", "9 €"),  # a no-break space collapses like any other
        ("  12   items  ", "9 a"),
        # Words in a row are one: a value with a number keeps its shape as they change.
        ("3 trains cancelled on the north line", "9 a"),
        ("Updated 5 minutes ago", "a 9 a"),
        ("Мощность 1200 Вт", "a 9 a"),
        # No digit: a name or a headline, whatever its words and script.
        ("Lisbon", "text"),
        ("Travel Mug", "text"),
        ("Chef Knife*", "text"),
        ("Harbour council votes on new budget", "text"),
        ("Лиссабон", "text"),
        ("", ""),
        ("   ", ""),
    ],
)
def test_value_shape(value: str, shape: str) -> None:
    assert value_shape(value) == shape


def test_shapes_are_distinct_sorted_and_capped() -> None:
    assert value_shapes(["$3.00", "$129.50", "4,00 €", None, 7, "Tea"]) == ["$9", "9 €", "text"]
    many = [f"{'x' * n}{n}" for n in range(1, 40)]  # "x1", "xx2": all "a9"
    assert value_shapes(many) == ["a9"]
    distinct = ["9" + "/9" * n for n in range(40)]
    assert len(value_shapes(distinct)) == MAX_SHAPES


def test_shapes_are_per_field_and_none_without_items() -> None:
    page = {"lang": "en", "notes": ["Prices in USD."], "labels": {"name": ["Name"]}}
    rows = [{"name": "Tea", "price": "$2.00"}, {"name": "Milk", "price": None}]
    found = fingerprint_of(page, rows, ["name", "price"])
    assert found.shapes == {"name": ["text"], "price": ["$9"]}
    assert (found.lang, found.notes, found.labels) == ("en", ["Prices in USD."], page["labels"])
    assert fingerprint_of(page, ["08:15", "21:40"], None).shapes == {"": ["9:9"]}
    # Nothing matched: the page's part (lang, notes) only.
    assert fingerprint_of(page, [], ["name"]).shapes == {}
    names = [f"f{n}" for n in range(MAX_FINGERPRINT_FIELDS + 5)]
    wide = fingerprint_of({}, [dict.fromkeys(names, "1")], names)
    assert list(wide.shapes) == names[:MAX_FINGERPRINT_FIELDS]


def test_a_lone_surrogate_the_page_holds_is_made_encodable() -> None:
    found = fingerprint_of({"notes": ["Deals \ud83d"], "labels": {"": ["x\udc00"]}}, [], None)
    assert found.notes == ["Deals \ufffd"] and found.labels == {"": ["x\ufffd"]}
    msgspec.json.encode(found)


@pytest.mark.anyio
@pytest.mark.parametrize("query", [False, True], ids=["reply", "events"])
async def test_a_vault_secret_a_page_shows_is_masked_in_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch, query: bool
) -> None:
    """A careless page shows back the password a login typed: as a note, a column
    header, a label. The reply and the events mask it in the fingerprint as in the
    items (redact_struct reaches into the nested struct), and keep the rest."""
    monkeypatch.setattr(secrets, "_secrets", set())
    password = "Vault-Pw-991"
    vault = Vault.of([("shop", "https://shop.test")], env={"ROTE_SECRET_SHOP": password})
    assert vault.fill("{{secret:shop}}", "https://shop.test/login") == password
    fingerprint = Fingerprint(
        lang="en",
        notes=[f"Your password is {password}.", "Prices in USD."],
        headers=["Name", password],
        labels={"name": ["Name", None], password: [f"{password} (USD)", "Price"]},
        struck={"name": [False, True]},
        paths={"name": "table>tbody>tr>td"},
        shapes={"name": ["text"]},
    )
    result = ToolResult(
        ok=True,
        output=[{"name": password}],
        duration_ms=1,
        metadata=ToolMetadata(url="https://shop.test/account", fingerprint=fingerprint),
    )
    shown = await masked(result, query=query)
    assert password not in msgspec.json.encode(shown).decode()
    got = shown.metadata.fingerprint
    assert isinstance(got, Fingerprint)
    assert got.notes == [f"Your password is {MASK}.", "Prices in USD."]
    assert got.headers == ["Name", MASK]
    assert got.labels == {"name": ["Name", None], MASK: [f"{MASK} (USD)", "Price"]}
    assert (got.lang, got.struck, got.paths, got.shapes) == (
        "en",
        fingerprint.struck,
        fingerprint.paths,
        fingerprint.shapes,
    )
    assert shown.metadata.url == "https://shop.test/account"
