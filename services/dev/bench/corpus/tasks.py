"""The cost benchmark's recurring tasks, its sites by name and the server that serves one
site in a chosen layout and edition (what the corpus is: services/dev/bench/corpus/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack

from services.dev.bench.corpus.site import LAYOUTS, Layout, Site
from services.dev.bench.corpus.sites import BOOKSHOP, EVENTS, FARES, GAZETTE, JOBS, KITCHEN, STAYS
from services.dev.bench.corpus.townhall import TOWNHALL
from services.dev.demo.pages import PageServer, Rendered

SITES: dict[str, Site] = {
    site.name: site for site in (GAZETTE, KITCHEN, BOOKSHOP, STAYS, FARES, JOBS, EVENTS, TOWNHALL)
}


# --- serving ------------------------------------------------------------------------------


class SiteServer(PageServer):
    """One site on its own port, with its own layout and edition (change them between
    runs: `server.layout = "v2"; server.edition += 1`)."""

    def __init__(
        self, site: Site, *, layout: Layout = "v1", edition: int = 0, host: str = "127.0.0.1"
    ) -> None:
        super().__init__(host=host, name=site.name)
        self.site = site
        self.layout: Layout = layout
        self.edition = edition

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        return self.site.render(path, self.layout, self.edition, form)


# --- the tasks ------------------------------------------------------------------------------

TaskKind = Literal["list", "click_list", "cheapest", "cheapest_detail", "form", "read", "extract"]


@dataclass(frozen=True)
class CorpusTask:
    """A recurring task: a prompt over one site, and the layouts its site goes through.

    `changes` are the 1-based runs before which the site moves to the next layout of
    `layouts`; `breaks` says whether the redesign is meant to break a replay (the unit
    test checks the markup really does, or really does not)."""

    task_id: str
    kind: TaskKind
    site: str
    prompt: str  # "{url}" is the site's origin
    breaks: bool = True
    layouts: tuple[Layout, ...] = LAYOUTS
    changes: tuple[int, ...] = (4, 8)

    def prompt_for(self, url: str) -> str:
        return self.prompt.format(url=url)

    def layout_at(self, run: int, changes: tuple[int, ...] | None = None) -> Layout:
        """The layout in force for 1-based `run`."""
        moved = sum(1 for before in (self.changes if changes is None else changes) if run >= before)
        return self.layouts[min(moved, len(self.layouts) - 1)]


class _Options(TypedDict, total=False):
    breaks: bool
    layouts: tuple[Layout, ...]
    changes: tuple[int, ...]


def _t(task_id: str, kind: TaskKind, site: str, prompt: str, **kw: Unpack[_Options]) -> CorpusTask:
    return CorpusTask(task_id, kind, site, prompt, **kw)


ONE_CHANGE: _Options = {"layouts": ("v1", "v2"), "changes": (6,)}

TASKS: tuple[CorpusTask, ...] = (
    _t("gazette-top3", "list", "gazette", "Open {url}/news and report the top 3 headlines"),
    _t("gazette-sports", "click_list", "gazette",
       "Open {url}/news, click Sports, and report the top 4 sports headlines"),
    _t("gazette-business", "click_list", "gazette",
       "Open {url}/news, click Business, and report the top 2 business headlines", **ONE_CHANGE),
    _t("gazette-story", "read", "gazette", "Open {url}/story/top-1 and read the page",
       breaks=False),
    _t("kitchen-cheapest", "cheapest", "kitchen",
       "Open {url}/products and report the cheapest product"),
    _t("kitchen-stock", "cheapest_detail", "kitchen",
       "Open {url}/products, open the cheapest product and report its stock"),
    _t("kitchen-prices", "extract", "kitchen", "Open {url}/products and extract `.price`",
       breaks=False),
    _t("books-cheapest", "cheapest", "bookshop", "Open {url}/books and report the cheapest book",
       **ONE_CHANGE),
    _t("books-author", "cheapest_detail", "bookshop",
       "Open {url}/books, open the cheapest book and report its author"),
    _t("books-new", "list", "bookshop", "Open {url}/books/new and report the top 5 titles"),
    _t("stays-lisbon", "cheapest", "stays",
       "Open {url}/hotels/lisbon and report the cheapest hotel"),
    _t("stays-porto-rating", "cheapest_detail", "stays",
       "Open {url}/hotels/porto, open the cheapest hotel and report its rating", **ONE_CHANGE),
    _t("fares-madrid", "cheapest", "fares",
       "Open {url}/fares/lis-mad and report the cheapest fare"),
    _t("fares-porto-departure", "cheapest_detail", "fares",
       "Open {url}/fares/lis-opo, open the cheapest fare and report its departure"),
    _t("jobs-top5", "list", "jobs", "Open {url}/jobs and report the top 5 jobs", **ONE_CHANGE),
    _t("jobs-design", "click_list", "jobs",
       "Open {url}/jobs, click Design, and report the top 3 design jobs"),
    _t("events-top4", "list", "events", "Open {url}/events and report the top 4 events"),
    _t("events-weekend", "click_list", "events",
       "Open {url}/events, click This weekend, and report the top 3 events", **ONE_CHANGE),
    _t("townhall-signup", "form", "townhall",
       "Open {url}/signup, fill the form with name=Ada Lovelace, email=ada@example.com, "
       "plan=pro and report the confirmation", breaks=False),
    _t("townhall-contact", "form", "townhall",
       'Open {url}/contact, fill the form with name=Grace Hopper, email=grace@example.com, '
       'message="Is the pool open on Sunday, and until when?" and report the confirmation',
       breaks=False),
    _t("townhall-booking", "form", "townhall",
       "Open {url}/booking, fill the form with name=Alan Turing, date=2025-07-01, guests=12 "
       "and report the confirmation", breaks=False),
    _t("townhall-status", "read", "townhall", "Open {url}/status and read the page",
       breaks=False),
)  # fmt: skip

TASKS_BY_ID: dict[str, CorpusTask] = {task.task_id: task for task in TASKS}
