"""Prices: every model of the table, both Haiku 5.5 bands, cache multipliers, aliases,
snapshot ids and the price-file override."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from contracts.llm import Usage
from services.kernel.pricing import PriceTable, PriceTableError, load_price_table

TABLE = load_price_table(None)
M = 1_000_000


@pytest.mark.parametrize(
    ("model", "inp", "out"),
    [
        ("claude-sonnet-5-5", 2.0, 10.0),
        ("claude-opus-5-5", 4.0, 20.0),
        ("claude-haiku-4-5", 1.0, 5.0),
        ("claude-sonnet-4-5", 3.0, 15.0),
        ("claude-opus-4-5", 5.0, 25.0),
    ],
)
def test_flat_priced_models(model: str, inp: float, out: float) -> None:
    usage = Usage(input_tokens=12_345, output_tokens=678)
    assert TABLE.cost(model, usage) == pytest.approx((12_345 * inp + 678 * out) / M)
    # A million of each costs exactly the list prices.
    assert TABLE.cost(model, Usage(input_tokens=M, output_tokens=M)) == pytest.approx(inp + out)


def test_aliases_resolve_to_the_5_5_family() -> None:
    assert TABLE.resolve("sonnet") == "claude-sonnet-5-5"
    assert TABLE.resolve("haiku") == "claude-haiku-5-5"
    assert TABLE.resolve("opus") == "claude-opus-5-5"
    assert TABLE.resolve("claude-opus-4-5") == "claude-opus-4-5"
    assert TABLE.resolve("llama3.2") == "llama3.2"


def test_haiku_5_5_low_band_up_to_100k_prompt_tokens() -> None:
    usage = Usage(input_tokens=100_000, output_tokens=1_000)
    assert TABLE.cost("claude-haiku-5-5", usage) == pytest.approx(
        (100_000 * 0.10 + 1_000 * 0.50) / M
    )


def test_haiku_5_5_high_band_above_100k_applies_to_input_and_output() -> None:
    usage = Usage(input_tokens=100_001, output_tokens=1_000)
    assert TABLE.cost("claude-haiku-5-5", usage) == pytest.approx(
        (100_001 * 0.50 + 1_000 * 2.50) / M
    )


def test_haiku_band_counts_cache_tokens_in_the_prompt_size() -> None:
    # 40k fresh + 30k written + 40k read = 110k prompt tokens: the high band, and the
    # cache multipliers apply to the high band's input price.
    usage = Usage(
        input_tokens=40_000, cache_write_tokens=30_000, cache_read_tokens=40_000, output_tokens=10
    )
    expected = (40_000 * 0.5 + 30_000 * 0.5 * 1.25 + 40_000 * 0.5 * 0.1 + 10 * 2.5) / M
    assert TABLE.cost("claude-haiku-5-5", usage) == pytest.approx(expected)
    # The same call without the cache read fits the low band.
    small = Usage(input_tokens=40_000, cache_write_tokens=30_000, output_tokens=10)
    assert TABLE.cost("claude-haiku-5-5", small) == pytest.approx(
        (40_000 * 0.1 + 30_000 * 0.1 * 1.25 + 10 * 0.5) / M
    )


def test_cache_write_multipliers_follow_the_ttl_the_api_reported() -> None:
    five_min = Usage(cache_write_tokens=1_000_000)
    one_hour = Usage(cache_write_tokens=1_000_000, cache_write_1h_tokens=1_000_000)
    mixed = Usage(cache_write_tokens=1_000_000, cache_write_1h_tokens=250_000)
    read = Usage(cache_read_tokens=1_000_000)
    assert TABLE.cost("claude-sonnet-5-5", five_min) == pytest.approx(2.0 * 1.25)
    assert TABLE.cost("claude-sonnet-5-5", one_hour) == pytest.approx(2.0 * 2.0)
    assert TABLE.cost("claude-sonnet-5-5", mixed) == pytest.approx(2.0 * (0.75 * 1.25 + 0.25 * 2))
    assert TABLE.cost("claude-sonnet-5-5", read) == pytest.approx(2.0 * 0.1)


def test_dated_snapshot_ids_are_priced_like_their_base_and_unknown_models_are_not() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100)
    assert TABLE.cost("claude-sonnet-4-5-20250929", usage) == TABLE.cost("claude-sonnet-4-5", usage)
    assert TABLE.cost("llama3.2", usage) is None


def test_listing_has_aliases_ids_prices_and_retirement() -> None:
    listing = TABLE.listing()
    assert listing.aliases == {
        "sonnet": "claude-sonnet-5-5",
        "haiku": "claude-haiku-5-5",
        "opus": "claude-opus-5-5",
    }
    by_id = {m.id: m for m in listing.models}
    assert set(by_id) == {
        "claude-sonnet-5-5",
        "claude-opus-5-5",
        "claude-haiku-5-5",
        "claude-haiku-4-5",
        "claude-sonnet-4-5",
        "claude-opus-4-5",
    }
    assert [b.up_to_prompt_tokens for b in by_id["claude-haiku-5-5"].bands] == [100_000, None]
    assert str(by_id["claude-sonnet-4-5"].retires_on) == "2026-11-30"


def test_retirement_is_told_within_a_month_and_after() -> None:
    table = load_price_table(None)
    assert table.retirement("claude-sonnet-4-5", date(2026, 10, 30)) is None
    assert table.retirement("claude-sonnet-4-5", date(2026, 10, 31)) == (
        "claude-sonnet-4-5 retires on 2026-11-30 (in 30 days)"
    )
    assert table.retirement("claude-sonnet-4-5-20250929", date(2026, 11, 30)) == (
        "claude-sonnet-4-5-20250929 retires on 2026-11-30 (in 0 days)"
    )
    assert table.retirement("claude-sonnet-4-5", date(2026, 12, 1)) == (
        "claude-sonnet-4-5 was retired on 2026-11-30"
    )
    assert table.retirement("claude-sonnet-5-5", date(2030, 1, 1)) is None  # no date known
    assert table.retirement("llama3", date(2030, 1, 1)) is None  # not in the table
    # Only aliases naming such a model are warned of: the defaults name none.
    assert table.aliases_retiring(date(2026, 12, 1)) == {}
    moved = PriceTable(aliases={**table.aliases, "fast": "claude-sonnet-4-5"}, models=table.models)
    assert moved.aliases_retiring(date(2026, 12, 1)) == {
        "fast": "claude-sonnet-4-5 was retired on 2026-11-30"
    }


def test_price_file_overrides_merges_and_adds(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "aliases": {"sonnet": "claude-sonnet-4-5", "local": "llama3.2"},
                "models": [
                    {
                        "id": "claude-sonnet-5-5",
                        "bands": [{"input_per_mtok": 2.5, "output_per_mtok": 12.0}],
                    },
                    {
                        "id": "llama3.2",
                        "bands": [{"input_per_mtok": 0.0, "output_per_mtok": 0.0}],
                    },
                ],
            }
        )
    )
    table = load_price_table(path)
    assert table.resolve("sonnet") == "claude-sonnet-4-5"
    assert table.resolve("haiku") == "claude-haiku-5-5"  # untouched default
    assert table.resolve("local") == "llama3.2"
    usage = Usage(input_tokens=M, output_tokens=M)
    assert table.cost("claude-sonnet-5-5", usage) == pytest.approx(14.5)
    assert table.cost("llama3.2", usage) == 0.0
    assert table.cost("claude-opus-5-5", usage) == pytest.approx(24.0)  # untouched default


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "prices.json"),
        ('{"modles": []}', "modles"),
        ('{"models": [{"id": "x", "bands": []}]}', "at least one price band"),
        (
            '{"models": [{"id": "x", "bands": [{"input_per_mtok": 1, "output_per_mtok": 1,'
            ' "up_to_prompt_tokens": 10}]}]}',
            "last band",
        ),
        (
            '{"models": [{"id": "x", "bands": [{"input_per_mtok": -1, "output_per_mtok": 1}]}]}',
            "negative",
        ),
        # A typo is named, not ignored in favour of the default price.
        (
            '{"models": [{"id": "x", "bands": [{"input_per_mtok": 1, "output_per_mtok": 1}],'
            ' "cache_read_multipler": 0.05}]}',
            r"cache_read_multipler.*\$\.models\[0\]",
        ),
        (
            '{"models": [{"id": "x", "bands": [{"input_per_mtok": 1, "output_per_mtok": 1,'
            ' "up_to_prompt_token": 5}]}]}',
            r"up_to_prompt_token.*\$\.models\[0\]\.bands\[0\]",
        ),
        # An alias to a model without a price would make every call through it free.
        ('{"aliases": {"sonnet": "claude-sonet-5-5"}}', "'sonnet' points to 'claude-sonet-5-5'"),
        (
            '{"models": [{"id": "x", "bands": [{"input_per_mtok": 1, "output_per_mtok": 1}]},'
            ' {"id": "x", "bands": [{"input_per_mtok": 9, "output_per_mtok": 9}]}]}',
            "more than once",
        ),
        ('{"models": [{"id": "", "bands": [{"input_per_mtok": 1, "output_per_mtok": 1}]}]}', "id"),
    ],
)
def test_bad_price_files_are_refused_with_a_reason(
    tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(PriceTableError, match=needle):
        load_price_table(path)


def test_a_price_the_file_gets_wrong_is_reported_with_the_file_s_name(tmp_path: Path) -> None:
    # `rote serve llm` prints only this message: it must say where the wrong price is.
    path = tmp_path / "my-prices.json"
    path.write_text('{"models": [{"id": "x", "bands": []}]}')
    with pytest.raises(PriceTableError, match=r"my-prices\.json: model 'x': needs at least"):
        load_price_table(path)


def test_a_price_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    band = {"input_per_mtok": 2.5, "output_per_mtok": 12.0}
    text = json.dumps({"models": [{"id": "claude-sonnet-5-5", "bands": [band]}]})
    path.write_text(text, encoding="utf-8-sig")  # as Notepad saves it
    table = load_price_table(path)
    usage = Usage(input_tokens=M, output_tokens=M)
    assert table.cost("claude-sonnet-5-5", usage) == pytest.approx(14.5)


def test_missing_price_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="cannot read price file"):
        load_price_table(tmp_path / "nope.json")


def test_only_the_older_haiku_and_sonnet_refuse_effort() -> None:
    refusing = {m for m in TABLE.models if not TABLE.accepts_effort(m)}
    assert refusing == {"claude-haiku-4-5", "claude-sonnet-4-5"}
    assert not TABLE.accepts_effort("claude-sonnet-4-5-20250929")  # a dated snapshot
    assert TABLE.accepts_effort("llama3.2")  # unknown: what the caller asked for goes


def test_a_price_file_keeps_or_sets_whether_a_model_takes_effort(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    band = [{"input_per_mtok": 1.0, "output_per_mtok": 1.0}]
    path.write_text(
        json.dumps(
            {
                "models": [
                    {"id": "claude-sonnet-4-5", "bands": band},  # a new price, same model
                    {"id": "claude-haiku-4-5-20251001", "bands": band},  # a dated snapshot
                    {"id": "old-local-model", "bands": band, "accepts_effort": False},
                    {"id": "new-local-model", "bands": band},
                ]
            }
        )
    )
    table = load_price_table(path)
    assert not table.accepts_effort("claude-sonnet-4-5")
    assert not table.accepts_effort("claude-haiku-4-5-20251001")  # as its base model
    assert not table.accepts_effort("old-local-model")
    assert table.accepts_effort("new-local-model")


def test_a_new_price_keeps_the_model_s_retirement_date_unless_the_file_says(
    tmp_path: Path,
) -> None:
    path = tmp_path / "prices.json"
    band = [{"input_per_mtok": 2.5, "output_per_mtok": 12.0}]
    path.write_text(
        json.dumps(
            {
                "models": [
                    # A new price (a discount): Sonnet 4.5 still retires on 2026-11-30.
                    {"id": "claude-sonnet-4-5", "bands": band},
                    {"id": "claude-sonnet-4-5-20250929", "bands": band},
                    {"id": "claude-opus-4-5", "bands": band, "retires_on": "2027-03-01"},
                    {"id": "claude-haiku-4-5", "bands": band, "retires_on": None},
                ]
            }
        )
    )
    table = load_price_table(path)
    today = date(2026, 11, 25)
    assert table.models["claude-sonnet-4-5"].retires_on == date(2026, 11, 30)
    assert table.models["claude-sonnet-4-5-20250929"].retires_on == date(2026, 11, 30)
    assert table.retirement("claude-sonnet-4-5", today) is not None
    assert table.models["claude-opus-4-5"].retires_on == date(2027, 3, 1)
    assert table.models["claude-haiku-4-5"].retires_on is None
