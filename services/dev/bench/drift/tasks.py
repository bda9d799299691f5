"""The drift benchmark's recurring tasks, the schedule of page states each goes through,
and the server that serves a site in a page state.

A task names the silent drifts it meets, in order (`drifts`): the first starts before run
3, the second before run 7, a third before run 9. A drift stays once it came (a redesign
does), except a stale copy, which lasts one run (a cache serves it once). Before run 5 the
site's layout changes (a breaking redesign: the recorded selectors find nothing); every
run shows a fresh edition of the data. Quick mode: runs 1-2 clean, the first drift from
run 3, 4 runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.dev.bench.drift.sites import SITES, DriftSite
from services.dev.bench.drift.state import Layout, PageState
from services.dev.demo.pages import PageServer, Rendered

Form = Literal["lookup", "extreme", "property", "ranked"]
TRANSIENT = frozenset({"stale_copy"})
RUNS = 10
QUICK_RUNS = 4
ONSETS = (3, 7, 9)  # the runs before which a task's 1st, 2nd and 3rd drift start
BREAK_BEFORE = 5  # full mode: the layout changes before this run


@dataclass(frozen=True)
class DriftTask:
    """A recurring task over one page of a drift site (`path`), in the stand-in's careful
    vocabulary. `field`, `key`, `direction`, `n` and `order` say what it asks for, so the
    ground truth (truth.py) is computed from the site's data, not from a prompt."""

    task_id: str
    form: Form
    site: str
    path: str
    drifts: tuple[str, ...]
    field: str = ""  # lookup, extreme, property: the value asked for ("high")
    key: str = ""  # lookup: the entry ("Lisbon")
    thing: str = ""  # extreme: what the entries are ("city"); ranked: ("headlines")
    direction: str = ""  # extreme: highest, lowest, earliest, latest
    n: int = 0  # ranked: how many
    order: str = ""  # ranked: newest, most read, ...

    @property
    def prompt(self) -> str:
        """The prompt with "{url}" for the site's origin."""
        page = "{url}" + self.path
        if self.form == "lookup":
            return f"Open {page} and report the {self.field} for {self.key}"
        if self.form == "extreme":
            return f"Open {page} and report the {self.thing} with the {self.direction} {self.field}"
        if self.form == "property":
            return f"Open {page} and report its {self.field}"
        return f"Open {page} and report the {self.n} {self.order} {self.thing}"

    def prompt_for(self, url: str) -> str:
        return self.prompt.format(url=url)


@dataclass(frozen=True)
class Scheduled:
    """One run of a task's schedule: the page state, and what changed just before it."""

    run: int
    state: PageState
    onset: str | None  # the silent drift that starts at this run
    broke: bool  # the layout changed just before this run


def schedule(task: DriftTask, quick: bool = False) -> list[Scheduled]:
    runs = QUICK_RUNS if quick else RUNS
    kinds = task.drifts[:1] if quick else task.drifts
    out: list[Scheduled] = []
    for run in range(1, runs + 1):
        layout: Layout = "v2" if not quick and run >= BREAK_BEFORE else "v1"
        active, onset = set(), None
        for kind, start in zip(kinds, ONSETS, strict=False):
            if run == start:
                onset = kind
            if run == start or (run > start and kind not in TRANSIENT):
                active.add(kind)
        state = PageState(edition=run - 1, layout=layout, drifts=frozenset(active))
        broke = bool(out) and out[-1].state.layout != layout
        out.append(Scheduled(run, state, onset, broke))
    return out


def _lookup(task_id: str, site: str, path: str, field: str, key: str, *drifts: str) -> DriftTask:
    return DriftTask(task_id, "lookup", site, path, drifts, field=field, key=key)


def _extreme(
    task_id: str, site: str, path: str, thing: str, direction: str, field: str, *drifts: str
) -> DriftTask:
    return DriftTask(
        task_id, "extreme", site, path, drifts, field=field, thing=thing, direction=direction
    )


def _property(task_id: str, slug: str, field: str, *drifts: str) -> DriftTask:
    return DriftTask(task_id, "property", "specs", f"/specs/{slug}", drifts, field=field)


def _ranked(task_id: str, path: str, n: int, order: str, thing: str, *drifts: str) -> DriftTask:
    return DriftTask(task_id, "ranked", "newsroom", path, drifts, thing=thing, n=n, order=order)


TASKS: tuple[DriftTask, ...] = (
    _lookup("weather-high-lisbon", "weather", "/forecast", "high", "Lisbon",
            "unit_changed", "columns_reordered", "stale_copy"),
    _lookup("weather-low-porto", "weather", "/forecast", "low", "Porto",
            "columns_reordered", "unit_changed", "stale_copy"),
    _extreme("weather-warmest", "weather", "/forecast", "city", "highest", "high",
             "unit_changed", "columns_reordered", "stale_copy"),
    _lookup("market-mug-price", "market", "/prices", "price", "Travel Mug",
            "currency_changed", "struck_price", "language"),
    _extreme("market-lowest", "market", "/prices", "product", "lowest", "price",
             "discontinued", "currency_changed", "struck_price"),
    _lookup("market-knife-stock", "market", "/prices", "stock", "Chef Knife",
            "columns_reordered", "stale_copy"),
    _lookup("finance-revenue-q2", "finance", "/results", "revenue", "Q2",
            "thousands", "currency_changed", "language"),
    _lookup("finance-profit-q4", "finance", "/results", "profit", "Q4",
            "columns_reordered", "thousands", "stale_copy"),
    _extreme("finance-best-quarter", "finance", "/results", "quarter", "highest", "profit",
             "thousands", "columns_reordered", "language"),
    _lookup("departures-faro", "departures", "/departures", "departure", "Faro",
            "time_zone", "columns_reordered", "stale_copy"),
    _lookup("departures-porto-platform", "departures", "/departures", "platform", "Porto",
            "columns_reordered", "stale_copy"),
    _extreme("departures-first", "departures", "/departures", "destination", "earliest",
             "departure", "time_zone", "columns_reordered", "stale_copy"),
    _lookup("calendar-jazz", "calendar", "/events", "date", "Jazz night",
            "date_format", "columns_reordered", "stale_copy"),
    _lookup("calendar-film", "calendar", "/events", "date", "Film club",
            "language", "columns_reordered", "stale_copy"),
    _lookup("calendar-chess-venue", "calendar", "/events", "venue", "Chess open",
            "columns_reordered", "stale_copy"),
    _extreme("calendar-first", "calendar", "/events", "event", "earliest", "date",
             "date_format", "stale_copy", "columns_reordered"),
    _ranked("news-newest", "/latest", 3, "newest", "headlines", "sort_reversed", "stale_copy"),
    _ranked("news-popular", "/popular", 2, "most read", "stories", "sort_reversed", "stale_copy"),
    _property("specs-grinder-weight", "espresso-grinder", "weight",
              "label_value_swapped", "unit_changed", "language"),
    _property("specs-jar-capacity", "cold-brew-jar", "capacity",
              "unit_changed", "label_value_swapped", "stale_copy"),
    _property("specs-board-width", "cutting-board", "width", "label_value_swapped", "stale_copy"),
)  # fmt: skip

TASKS_BY_ID: dict[str, DriftTask] = {t.task_id: t for t in TASKS}
# Quick mode: six tasks on five sites whose first drifts are of six kinds.
QUICK_TASKS = ("weather-high-lisbon", "weather-low-porto", "market-mug-price",
               "departures-faro", "news-newest", "specs-board-width")  # fmt: skip


class DriftServer(PageServer):
    """One drift site on its own port, in a page state (set `server.state` between runs)."""

    def __init__(self, site: DriftSite, state: PageState | None = None) -> None:
        super().__init__(host="127.0.0.1", name=site.name)
        self.site = site
        self.state = state or PageState(edition=0)

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        return self.site.render(path, self.state)


def server_for(task: DriftTask, state: PageState | None = None) -> DriftServer:
    return DriftServer(SITES[task.site], state)
