"""Model aliases and list prices, and the cost of one call from the usage the API returned.

Prices change, so the table can be overridden by a JSON file (ROTE_PRICES_FILE) shaped
like the `rote.api.llm.models` reply:

    {"aliases": {"sonnet": "claude-sonnet-5-5"},
     "models": [{"id": "claude-sonnet-5-5",
                 "bands": [{"input_per_mtok": 2.0, "output_per_mtok": 10.0}]}]}

File aliases are merged over the defaults; a file model replaces the default entry with
the same id or adds a new one. The file is read strictly: an unknown field (a typo) is an
error naming it, and so is an alias whose model has no price.

A model's `accepts_effort` says whether it takes the `effort` parameter: the 4.5 Haiku
and Sonnet answer 400 to it, so rote leaves it out for them. A file model that does not
say keeps what the built-in table says for its id (True for an id it does not know), and
so does its `retires_on` (null: it does not retire).

A model may be priced in bands by prompt size (input + cache write + cache read tokens):
the first band whose `up_to_prompt_tokens` is at least the prompt size applies to the
whole call, input and output alike. Cache writes cost 1.25x the band's input price for a
5-minute TTL or 2x for a 1-hour TTL, cache reads 0.1x.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import msgspec

from contracts.llm import ModelPrice, ModelsReply, PriceBand, PriceFile, PriceFileModel, Usage

DEFAULT_ALIASES: dict[str, str] = {
    "sonnet": "claude-sonnet-5-5",
    "haiku": "claude-haiku-5-5",
    "opus": "claude-opus-5-5",
}

# Haiku 5.5 costs more per token once the prompt exceeds this many tokens.
HAIKU_5_5_BAND_LIMIT = 100_000


def _flat(
    model_id: str,
    inp: float,
    out: float,
    retires_on: date | None = None,
    *,
    accepts_effort: bool = True,
) -> ModelPrice:
    return ModelPrice(
        id=model_id,
        bands=[PriceBand(input_per_mtok=inp, output_per_mtok=out)],
        retires_on=retires_on,
        accepts_effort=accepts_effort,
    )


DEFAULT_PRICES: tuple[ModelPrice, ...] = (
    _flat("claude-sonnet-5-5", 2.0, 10.0),
    _flat("claude-opus-5-5", 4.0, 20.0),
    ModelPrice(
        id="claude-haiku-5-5",
        bands=[
            PriceBand(
                input_per_mtok=0.10, output_per_mtok=0.50, up_to_prompt_tokens=HAIKU_5_5_BAND_LIMIT
            ),
            PriceBand(input_per_mtok=0.50, output_per_mtok=2.50),
        ],
    ),
    # Older ids still in use; of these only Opus 4.5 takes `effort`.
    _flat("claude-haiku-4-5", 1.0, 5.0, accepts_effort=False),
    _flat("claude-sonnet-4-5", 3.0, 15.0, retires_on=date(2026, 11, 30), accepts_effort=False),
    _flat("claude-opus-4-5", 5.0, 25.0),
)

# How far ahead of a model's retirement the llm service warns of the aliases naming it.
RETIRING_SOON_DAYS = 30

# A dated snapshot id ("claude-sonnet-4-5-20250929") is priced like its base id.
_SNAPSHOT = re.compile(r"^(?P<base>.+)-\d{8}$")


class PriceTableError(ValueError):
    """The price file cannot be read or does not describe a usable table."""


def check_price(price: ModelPrice) -> None:
    """Bands must be ordered by size, end with an unbounded band, and cost >= 0."""
    where = f"model {price.id!r}"
    if not price.bands:
        raise PriceTableError(f"{where}: needs at least one price band")
    limits = [band.up_to_prompt_tokens for band in price.bands]
    if limits[-1] is not None:
        raise PriceTableError(f"{where}: the last band must have no up_to_prompt_tokens")
    bounded = [limit for limit in limits[:-1] if limit is not None]
    if len(bounded) != len(limits) - 1:
        raise PriceTableError(f"{where}: only the last band may be unbounded")
    if bounded != sorted(bounded) or len(set(bounded)) != len(bounded):
        raise PriceTableError(f"{where}: band limits must increase")
    for band in price.bands:
        if band.input_per_mtok < 0 or band.output_per_mtok < 0:
            raise PriceTableError(f"{where}: prices cannot be negative")
    multipliers = (
        price.cache_write_5m_multiplier,
        price.cache_write_1h_multiplier,
        price.cache_read_multiplier,
    )
    if any(m < 0 for m in multipliers):
        raise PriceTableError(f"{where}: cache multipliers cannot be negative")


def band_for(price: ModelPrice, prompt_tokens: int) -> PriceBand:
    for band in price.bands:
        if band.up_to_prompt_tokens is None or prompt_tokens <= band.up_to_prompt_tokens:
            return band
    return price.bands[-1]


def cost(price: ModelPrice, usage: Usage) -> float:
    """USD for one call. The 1-hour share of cache writes is priced at the 1-hour
    multiplier, the rest at the 5-minute one."""
    band = band_for(price, usage.prompt_tokens)
    write_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    write_5m = usage.cache_write_tokens - write_1h
    input_equivalent = (
        usage.input_tokens
        + write_5m * price.cache_write_5m_multiplier
        + write_1h * price.cache_write_1h_multiplier
        + usage.cache_read_tokens * price.cache_read_multiplier
    )
    dollars = (
        input_equivalent * band.input_per_mtok + usage.output_tokens * band.output_per_mtok
    ) / 1_000_000
    return round(dollars, 9)


@dataclass(frozen=True)
class PriceTable:
    aliases: Mapping[str, str]
    models: Mapping[str, ModelPrice]

    def resolve(self, model: str) -> str:
        """An alias becomes its model id; anything else is taken as a model id."""
        return self.aliases.get(model, model)

    def price(self, model_id: str) -> ModelPrice | None:
        if model_id in self.models:
            return self.models[model_id]
        snapshot = _SNAPSHOT.match(model_id)
        if snapshot:
            return self.models.get(snapshot.group("base"))
        return None

    def accepts_effort(self, model_id: str) -> bool:
        """Whether to send `effort` to this model: a model the table does not know (a
        local one) gets what the caller asked for."""
        price = self.price(model_id)
        return True if price is None else price.accepts_effort

    def cost(self, model_id: str, usage: Usage) -> float | None:
        """None when the model has no price (a local model behind ANTHROPIC_BASE_URL)."""
        price = self.price(model_id)
        return None if price is None else cost(price, usage)

    def retirement(self, model_id: str, today: date) -> str | None:
        """What to say of the model's retirement when it is past or near (within
        RETIRING_SOON_DAYS), else None. The date is the last day the API serves it."""
        price = self.price(model_id)
        if price is None or price.retires_on is None:
            return None
        days = (price.retires_on - today).days
        if days < 0:
            return f"{model_id} was retired on {price.retires_on}"
        if days <= RETIRING_SOON_DAYS:
            return f"{model_id} retires on {price.retires_on} (in {days} days)"
        return None

    def aliases_retiring(self, today: date) -> dict[str, str]:
        """alias -> the retirement notice of the model it names, for those near or past."""
        notices = {alias: self.retirement(model, today) for alias, model in self.aliases.items()}
        return {alias: notice for alias, notice in notices.items() if notice}

    def listing(self) -> ModelsReply:
        return ModelsReply(aliases=dict(self.aliases), models=list(self.models.values()))


def default_table() -> PriceTable:
    return PriceTable(
        aliases=dict(DEFAULT_ALIASES), models={price.id: price for price in DEFAULT_PRICES}
    )


def load_price_table(path: Path | None) -> PriceTable:
    """The default table, with the file at `path` (if any) merged over it."""
    table = default_table()
    for price in table.models.values():
        check_price(price)
    if path is None:
        return table
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PriceTableError(f"cannot read price file {path}: {exc.strerror or exc}") from None
    # Saved by some Windows editors with a byte order mark, which JSON does not allow.
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        override = msgspec.json.decode(raw, type=PriceFile)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise PriceTableError(f"price file {path}: {exc}") from None
    ids = [entry.id for entry in override.models]
    twice = sorted({model_id for model_id in ids if ids.count(model_id) > 1})
    if twice:
        # One would silently win: say which, rather than guess which price was meant.
        raise PriceTableError(f"price file {path}: models listed more than once: {twice}")
    models = dict(table.models)
    for entry in override.models:
        # A dated snapshot (claude-haiku-4-5-20251001) is the model its base id names:
        # what the table knows of that model holds for it too, unless the file says.
        price = _from_file(entry, models.get(entry.id) or table.price(entry.id))
        try:
            check_price(price)
        except PriceTableError as exc:
            # The service prints only this: say which file holds the wrong price.
            raise PriceTableError(f"price file {path}: {exc}") from None
        models[price.id] = price
    merged = PriceTable(aliases={**table.aliases, **override.aliases}, models=models)
    for alias, model_id in merged.aliases.items():
        # Priced at $0 it would hide every call's cost behind one warning in the log.
        if merged.price(model_id) is None:
            raise PriceTableError(
                f"price file {path}: alias {alias!r} points to {model_id!r}, which has no "
                f'price; add {model_id!r} to "models" (a price of 0 suits a local model)'
            )
    return merged


def _from_file(entry: PriceFileModel, default: ModelPrice | None) -> ModelPrice:
    accepts_effort = entry.accepts_effort
    if accepts_effort is None:
        accepts_effort = True if default is None else default.accepts_effort
    retires_on = entry.retires_on
    if retires_on is msgspec.UNSET:
        retires_on = None if default is None else default.retires_on
    return ModelPrice(
        id=entry.id,
        bands=[
            PriceBand(
                input_per_mtok=band.input_per_mtok,
                output_per_mtok=band.output_per_mtok,
                up_to_prompt_tokens=band.up_to_prompt_tokens,
            )
            for band in entry.bands
        ],
        cache_write_5m_multiplier=entry.cache_write_5m_multiplier,
        cache_write_1h_multiplier=entry.cache_write_1h_multiplier,
        cache_read_multiplier=entry.cache_read_multiplier,
        retires_on=retires_on,
        accepts_effort=accepts_effort,
    )
