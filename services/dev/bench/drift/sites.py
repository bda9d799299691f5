"""The drift corpus's seven sites and their data, seeded by site and edition (the same in
every process): a weather forecast, a shop's prices, quarterly results, train
departures, an events calendar, a newsroom's rankings and product specifications."""

from __future__ import annotations

from datetime import date
from typing import Any

from services.dev.bench.corpus.site import rng_for
from services.dev.bench.drift.pages import PairsSite, RankedSite, Ranking, Spec
from services.dev.bench.drift.state import PageState, say
from services.dev.bench.drift.tables import Column, Row, TableSite

# -- weather: °F, one row per city in a fixed order

_CITIES = ["Lisbon", "Porto", "Faro", "Coimbra", "Braga", "Evora", "Madrid", "Seville"]
_SKIES = ["Sunny", "Cloudy", "Showers", "Windy", "Fog"]


def _forecast(edition: int) -> list[Row]:
    rng = rng_for("drift-weather", edition)
    highs = rng.sample(range(48, 95), len(_CITIES))  # distinct: one warmest city
    return [
        {"city": city, "sky": rng.choice(_SKIES), "high": high,
         "low": high - rng.randint(8, 20), "rain": f"{rng.randint(0, 90)}%"}
        for city, high in zip(_CITIES, highs, strict=True)
    ]  # fmt: skip


def _weather_notes(state: PageState) -> list[str]:
    unit = "°C" if state.has("unit_changed") else "°F"
    return [say(state, f"Temperatures in {unit}.", f"Temperaturas em {unit}.")]


WEATHER = TableSite(
    name="weather",
    title="Harbour Weather",
    path="/forecast",
    heading=("Forecast", "Previsão"),
    columns=(
        Column("city", "City", "Cidade", "key"),
        Column("sky", "Sky", "Céu"),
        Column("high", "High", "Máxima", "temperature"),
        Column("low", "Low", "Mínima", "temperature"),
        Column("rain", "Rain", "Chuva"),
    ),
    rows=_forecast,
    notes=_weather_notes,
    swap=("high", "low"),
)

# -- market: USD prices, one row per product in a fixed order

_PRODUCTS = [("Espresso Grinder", 129.0), ("Pour-over Kettle", 54.5), ("Travel Mug", 34.0),
             ("Milk Frother", 34.0), ("Coffee Scale", 42.75), ("Cold Brew Jar", 27.5),
             ("Chef Knife", 89.0), ("Cutting Board", 31.0)]  # fmt: skip


def _prices(edition: int) -> list[Row]:
    rng = rng_for("drift-market", edition)
    rows = []
    for name, base in _PRODUCTS:
        price = round(base * rng.uniform(0.7, 1.3), 2)
        rows.append({"product": name, "price": price, "stock": str(rng.randint(2, 40))})
    return rows


def _market_notes(state: PageState) -> list[str]:
    currency = "EUR" if state.has("currency_changed") else "USD"
    return [say(state, f"Prices in {currency}.", f"Preços em {currency}.")]


MARKET = TableSite(
    name="market",
    title="Kitchen Market",
    path="/prices",
    heading=("Prices", "Preços"),
    columns=(
        Column("product", "Product", "Produto", "key"),
        Column("price", "Price", "Preço", "price"),
        Column("stock", "Stock", "Stock"),
    ),
    rows=_prices,
    notes=_market_notes,
    swap=("price", "stock"),
    struck="Travel Mug",
)

# -- finance: quarterly figures in whole USD thousands

_QUARTERS = ["Q1", "Q2", "Q3", "Q4"]


def _results(edition: int) -> list[Row]:
    rng = rng_for("drift-finance", edition)
    rows = []
    profits = rng.sample(range(150, 900), len(_QUARTERS))  # distinct: one best quarter
    for quarter, profit in zip(_QUARTERS, profits, strict=True):
        costs = rng.randint(800, 2400)
        rows.append({"quarter": quarter, "revenue": (costs + profit) * 1000,
                     "costs": costs * 1000, "profit": profit * 1000})  # fmt: skip
    return rows


def _finance_notes(state: PageState) -> list[str]:
    currency = "EUR" if state.has("currency_changed") else "USD"
    if state.has("thousands"):
        return [
            say(state, f"Figures in {currency} thousands.", f"Valores em {currency} (milhares).")
        ]
    return [say(state, f"Figures in {currency}.", f"Valores em {currency}.")]


FINANCE = TableSite(
    name="finance",
    title="Harbour Holdings",
    path="/results",
    heading=("Quarterly results", "Resultados trimestrais"),
    columns=(
        Column("quarter", "Quarter", "Trimestre", "key"),
        Column("revenue", "Revenue", "Receita", "figure"),
        Column("costs", "Costs", "Custos", "figure"),
        Column("profit", "Profit", "Lucro", "figure"),
    ),
    rows=_results,
    notes=_finance_notes,
    swap=("costs", "profit"),
)

# -- departures: times in UTC minutes, earliest first

_DESTINATIONS = ["Porto", "Faro", "Coimbra", "Braga", "Evora", "Aveiro", "Lagos", "Tomar"]


def _departures(edition: int) -> list[Row]:
    rng = rng_for("drift-departures", edition)
    times = rng.sample(range(6 * 60, 22 * 60, 5), len(_DESTINATIONS))
    # Platforms move round by one every edition: never the same two days running.
    return [
        {"destination": d, "train": f"IC {rng.randint(500, 799)}", "departure": t,
         "platform": str((i + edition) % 12 + 1)}
        for i, (d, t) in enumerate(zip(_DESTINATIONS, times, strict=True))
    ]  # fmt: skip


def _departure_notes(state: PageState) -> list[str]:
    zone = "CET (UTC+1)" if state.has("time_zone") else "UTC"
    order = ("Latest first.", "Mais tardias primeiro.")
    if not state.has("sort_reversed"):
        order = ("Earliest first.", "Mais cedo primeiro.")
    return [say(state, f"Times in {zone}.", f"Horas em {zone}."), say(state, *order)]


DEPARTURES = TableSite(
    name="departures",
    title="Harbour Rail",
    path="/departures",
    heading=("Departures", "Partidas"),
    columns=(
        Column("destination", "Destination", "Destino", "key"),
        Column("train", "Train", "Comboio"),
        Column("departure", "Departure", "Partida", "time"),
        Column("platform", "Platform", "Plataforma"),
    ),
    rows=_departures,
    notes=_departure_notes,
    swap=("departure", "platform"),
    order_by=("departure", False),
)

# -- calendar: dates whose day and month can be read either way round

_EVENTS = ["Jazz night", "Food market", "Poetry reading", "Film club", "Craft fair",
           "Choir concert", "Harbour tour", "Chess open"]  # fmt: skip
_VENUES = ["Quay", "Market Hall", "Lighthouse Park", "Old Town", "Library", "Tram Square"]


def _ambiguous_day(rng: Any, taken: set[date]) -> date:
    """A day whose day-of-month is 12 or less and not its month: 03/04 reads either way."""
    while True:
        month, day = rng.randint(1, 12), rng.randint(1, 12)
        when = date(2025, month, day)
        if day != month and when not in taken:
            taken.add(when)
            return when


def _calendar(edition: int) -> list[Row]:
    rng = rng_for("drift-calendar", edition)
    taken: set[date] = set()
    return [
        {"event": e, "date": _ambiguous_day(rng, taken), "venue": rng.choice(_VENUES)}
        for e in _EVENTS
    ]


def _calendar_notes(state: PageState) -> list[str]:
    if state.lang == "pt":
        return ["Datas: dia/mês/ano."]
    order = "day/month/year" if state.has("date_format") else "month/day/year"
    return [f"Dates are {order}."]


CALENDAR = TableSite(
    name="calendar",
    title="What's on",
    path="/events",
    heading=("Events", "Eventos"),
    columns=(
        Column("event", "Event", "Evento", "key"),
        Column("date", "Date", "Data", "date"),
        Column("venue", "Venue", "Local"),
    ),
    rows=_calendar,
    notes=_calendar_notes,
    swap=("date", "venue"),
)

# -- newsroom: stories ranked by time and by reads

_SUBJECTS = ["Harbour council", "Old town bakery", "Riverside school", "Night tram",
             "City orchestra", "Botanical garden", "Rowing club", "Market hall"]  # fmt: skip
_HAPPENINGS = ["votes on new budget", "reopens after repairs", "wins national prize",
               "plans summer fair", "hires new director", "extends hours"]  # fmt: skip


def _stories(edition: int) -> list[dict[str, Any]]:
    rng = rng_for("drift-news", edition)
    titles = rng.sample([f"{a} {b}" for a in _SUBJECTS for b in _HAPPENINGS], 8)
    times = rng.sample(range(0, 24 * 60), 8)
    reads = rng.sample(range(100, 9000), 8)
    return [
        {"title": t, "time": m, "reads": r} for t, m, r in zip(titles, times, reads, strict=True)
    ]


NEWSROOM = RankedSite(
    name="newsroom",
    title="Harbour Gazette",
    rankings=(
        Ranking("/latest", "Latest", "time", ("Newest first.", "Mais recentes primeiro."),
                ("Oldest first.", "Mais antigos primeiro.")),
        Ranking("/popular", "Popular", "reads", ("Most read first.", "Mais lidos primeiro."),
                ("Least read first.", "Menos lidos primeiro.")),
    ),
    stories=_stories,
)  # fmt: skip

# -- specifications: kg, cm, l

_SPEC_PRODUCTS = {"espresso-grinder": "Espresso Grinder", "cold-brew-jar": "Cold Brew Jar",
                  "cutting-board": "Cutting Board"}  # fmt: skip
_SPEC_BASES = {"espresso-grinder": (3.4, 18, 36, 0.3), "cold-brew-jar": (1.1, 14, 28, 1.5),
               "cutting-board": (2.2, 45, 3, 0.0)}  # fmt: skip


def _spec_values(slug: str, edition: int) -> dict[str, float]:
    """Each batch measures a little differently, never the same two editions running."""
    weight, width, height, capacity = _SPEC_BASES[slug]
    step = edition % 6  # a stale copy (7 editions old) shows other values
    return {
        "weight": round(weight * (0.7 + 0.1 * step), 1),
        "width": float(width - 3 + step),
        "height": float(height + (edition % 5)),
        "capacity": round(capacity * (0.7 + 0.1 * step), 1),
    }


SPECS = PairsSite(
    name="specs",
    title="Kitchen Specs",
    products=_SPEC_PRODUCTS,
    specs=(
        Spec("weight", "Weight", "Peso", "kg", 1),
        Spec("width", "Width", "Largura", "cm", 0),
        Spec("height", "Height", "Altura", "cm", 0),
        Spec("capacity", "Capacity", "Capacidade", "l", 1),
    ),
    values=_spec_values,
)

DriftSite = TableSite | PairsSite | RankedSite
SITES: dict[str, DriftSite] = {
    s.name: s for s in (WEATHER, MARKET, FINANCE, DEPARTURES, CALENDAR, NEWSROOM, SPECS)
}
