"""`rote demo`: one task's whole life, on the embedded stack.

Run 1 is a full LLM run and compiles executor v1; runs 2 and 3 replay it; the site then
changes its layout; run 4's replay breaks and heals the broken step in place with the
small model, which makes v2 (a candidate); run 5 replays v2 and verifies it. The site
changes again, in a way no locator can bridge: run 6's replay cannot heal, the run falls
back to the full loop and its trace compiles v3; run 7 replays v3. Offline, the model is
the scripted stand-in served over the Anthropic Messages API; with --live it is Claude.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from contracts import subjects as s
from contracts.executors import ExecutorEvent, ExecutorHealth, ExecutorRef
from contracts.llm import ModelsReply
from contracts.runs import ReplayOutcome, RunEvent
from contracts.tasks import CreateTask, RunAccepted, RunTask, TaskView
from services.dev.demo.site import DemoSite, Layout
from services.executor.cost import full_run_cost
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.embedded_nats import free_port
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.kernel.text import cut_text

TASK_ID = "demo-news"
RUNS = 7
LAYOUT_CHANGE_BEFORE_RUN = 4
# The site's changes: the run they come before, the layout, what the demo says of it.
CHANGES: dict[int, tuple[Layout, str]] = {
    LAYOUT_CHANGE_BEFORE_RUN: (
        "v2",
        "the site changes its layout (v1 -> v2); old selectors stop matching",
    ),
    6: ("v3", "the site changes again (v2 -> v3): each headline now shares its line with a time"),
}
SERVICES = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]


class DemoStopped(Exception):
    """A run failed before any executor was compiled: every later run would be a full
    run failing the same way (a model that refuses the key, a site that is down)."""


@dataclass
class RunRow:
    number: int
    run_id: str
    layout: str  # the site's layout this run saw
    status: str
    source: str
    executor_version: int | None
    fell_back: bool
    large_tokens: int
    small_tokens: int
    cost_usd: float
    saved_usd: float
    duration_ms: int
    result: str
    # A completed full LLM run's own cost: a fallback's cost_usd also holds the replay
    # attempt that broke before it, which no always-full run would have paid for.
    full_run_cost_usd: float | None = None
    failed_replay_cost_usd: float = 0.0
    # A replay whose answer was checked: the verdict (verified, wrong, unverified).
    checked: str | None = None
    # Steps the replay healed in place.
    healed: int = 0


@dataclass
class DemoReport:
    rows: list[RunRow] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    @property
    def total_cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.rows)

    @property
    def full_run_cost_by_layout(self) -> dict[str, float]:
        """What one full LLM run of the task costs on each layout, as measured: a new
        layout's page (and so the conversation) differs, and so may its cost."""
        costs: dict[str, list[float]] = {}
        for r in self.rows:
            if r.full_run_cost_usd is not None:
                costs.setdefault(r.layout, []).append(r.full_run_cost_usd)
        return {layout: statistics.fmean(c) for layout, c in costs.items()}

    def full_run_cost_of(self, row: RunRow) -> float:
        """What `row` would have cost as a full LLM run: its layout's full run, or (no
        full run measured on that layout: a replay that survived the change) the mean
        of every measured full run."""
        by_layout = self.full_run_cost_by_layout
        if row.layout in by_layout:
            return by_layout[row.layout]
        return statistics.fmean(by_layout.values()) if by_layout else 0.0

    @property
    def all_full_cost_usd(self) -> float:
        return sum(self.full_run_cost_of(r) for r in self.rows)

    @property
    def full_runs_after_change(self) -> int:
        return sum(
            1 for r in self.rows if r.number >= LAYOUT_CHANGE_BEFORE_RUN and r.source == "full_llm"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "runs": [r.__dict__ for r in self.rows],
            "versions": self.versions,
            "total_cost_usd": round(self.total_cost_usd, 8),
            "all_full_cost_usd": round(self.all_full_cost_usd, 8),
            "full_run_cost_usd_by_layout": {
                layout: round(cost, 8) for layout, cost in self.full_run_cost_by_layout.items()
            },
            "full_runs_caused_by_site_change": self.full_runs_after_change,
        }


Printer = Callable[[str], None]


async def _model_ids(bus: Bus) -> dict[str, str]:
    models = await bus.request(s.LLM_MODELS, b"{}", ModelsReply)
    return models.aliases


async def _finished(bus: Bus, run_id: str, timeout: float) -> RunEvent:
    with anyio.fail_after(timeout):
        while True:
            for msg in reversed(
                await read_all(bus.js, s.STREAM_RUNS, s.run_events_of(run_id=run_id))
            ):
                event = decode(msg.data, RunEvent)
                if event.event in ("completed", "failed"):
                    return event
            await anyio.sleep(0.2)


async def _executor_event(bus: Bus, name: str, run_id: str, timeout: float) -> None:
    """Until the task has executor event `name` for `run_id` (or `timeout` passes: the
    summary then shows what the compiler has recorded so far)."""
    with anyio.move_on_after(timeout):
        while True:
            for msg in await read_all(bus.js, s.STREAM_EXECUTORS, s.executor_event(TASK_ID, name)):
                if decode(msg.data, ExecutorEvent).run_id == run_id:
                    return
            await anyio.sleep(0.2)


async def _compiled(bus: Bus, run_id: str, timeout: float) -> ExecutorEvent | None:
    """The `compiled` event of full run `run_id`'s trace (None if the compiler skipped
    it). Matched by run: an earlier run's skip must not stand for this run's outcome."""
    with anyio.fail_after(timeout):
        while True:
            for msg in await read_all(bus.js, s.STREAM_EXECUTORS, s.executor_event(TASK_ID, "*")):
                event = decode(msg.data, ExecutorEvent)
                if event.run_id != run_id:
                    continue
                if event.event == "compiled":
                    return event
                if event.event == "skipped":
                    return None
            await anyio.sleep(0.2)


def _row(number: int, layout: str, event: RunEvent, large: str, small: str) -> RunRow:
    def tokens(model: str) -> int:
        t = event.tokens.get(model)
        return (t.input_tokens + t.output_tokens) if t else 0

    replay = event.replay
    return RunRow(
        number=number,
        run_id=event.run_id,
        layout=layout,
        status=event.status,
        source=event.source or "-",
        executor_version=event.executor_version,
        fell_back=event.fell_back,
        large_tokens=tokens(large),
        small_tokens=tokens(small),
        cost_usd=event.cost_usd,
        saved_usd=event.cost_saved_usd,
        duration_ms=event.duration_ms or 0,
        result=event.result or (event.error or ""),
        full_run_cost_usd=full_run_cost(event),
        failed_replay_cost_usd=replay.cost_usd if replay is not None and not replay.ok else 0.0,
        checked=_checked(replay),
        healed=len(replay.healed_steps) if replay is not None and replay.ok else 0,
    )


def _checked(replay: ReplayOutcome | None) -> str | None:
    """The verdict on a replay's answer, when the small model (or a shadow) checked it."""
    check = replay.verification if replay is not None else None
    return check.status if check is not None and check.status != "skipped" else None


def _first_line(event: RunEvent, limit: int = 300) -> str:
    """The first line of a failed run's error, cut to `limit` (runs.get has it all)."""
    lines = (event.error or "").strip().splitlines()
    return cut_text(lines[0], limit) if lines else "no error given"


HEADER = (
    f"{'run':>3}  {'source':<8}  {'exec':>4}  {'large tok':>9}  {'small tok':>9}  "
    f"{'cost $':>10}  {'saved $':>10}  {'time':>7}"
)


def format_row(row: RunRow) -> str:
    version = f"v{row.executor_version}" if row.executor_version else "-"
    note = "  (replay broke, fell back)" if row.fell_back else ""
    if row.checked == "wrong":
        note = "  (replay's answer judged wrong, fell back)"
    elif row.checked and row.healed:
        note = f"  (healed in place; answer checked: {row.checked})"
    elif row.checked:
        note = f"  (answer checked: {row.checked})"
    if row.status != "completed":
        note += "  FAILED"
    return (
        f"{row.number:>3}  {row.source:<8}  {version:>4}  {row.large_tokens:>9}  "
        f"{row.small_tokens:>9}  {row.cost_usd:>10.6f}  {row.saved_usd:>10.6f}  "
        f"{row.duration_ms / 1000:>6.2f}s{note}"
    )


async def run_demo(
    *,
    settings: Settings,
    site: DemoSite,
    out: Printer,
    run_timeout_s: float = 180.0,
) -> DemoReport:
    report = DemoReport()
    async with open_stack(
        settings, SERVICES, join_running=False, embedded_port=free_port()
    ) as stack:
        bus = stack.bus
        aliases = await _model_ids(bus)
        spec = CreateTask(
            task_id=TASK_ID,
            name="Demo town headlines",
            prompt=f"Open {site.url}/news and report the top 3 headlines",
            # Runs that read the same way every time: no sampled shadow full run.
            shadow_rate=0.0,
        )
        large = aliases.get(spec.model, spec.model)
        small = aliases.get(spec.small_model, spec.small_model)
        await bus.request(s.TASKS_CREATE, spec, TaskView)
        out(f"NATS {stack.nats_url} (embedded); site {site.url}; models {large} / {small}")
        out(f"task {TASK_ID!r}: {spec.prompt}")
        out("")
        out(HEADER)
        for number in range(1, RUNS + 1):
            if number in CHANGES:
                site.layout, said = CHANGES[number]
                out(f"    -- {said}")
            site.edition = number - 1  # fresh headlines every run: a replay must read the page
            accepted = await bus.request(s.TASKS_RUN, RunTask(task_id=TASK_ID), RunAccepted)
            event = await _finished(bus, accepted.run_id, run_timeout_s)
            row = _row(number, site.layout, event, large, small)
            report.rows.append(row)
            out(format_row(row))
            await _after_run(bus, report, number, event, out)
        last = report.rows[-1]
        if last.source == "executor":
            # The compiler records a replay from its run event, a moment after the run
            # ends: the summary's counts must include the last one.
            await _executor_event(bus, "replay_succeeded", last.run_id, 30)
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id=TASK_ID), ExecutorHealth)
    _summary(report, health, out)
    return report


async def _after_run(
    bus: Bus, report: DemoReport, number: int, event: RunEvent, out: Printer
) -> None:
    """Say why a run failed (stop when no executor exists yet), or, after a full run,
    wait for what its trace compiled to."""
    if event.status != "completed":
        why = f"run {number} failed ({event.reason or event.status}): {_first_line(event)}"
        out(f"         {why}")
        if not report.versions:
            raise DemoStopped(f"{why}; the runs after it need the executor it compiles")
    elif event.replay is not None and event.replay.ok and event.replay.healed_steps:
        healed = await _compiled(bus, event.run_id, 60)
        if healed is None or healed.version is None:
            out("         the heal was not recorded as a version")
            return
        report.versions.append(healed.version)
        steps = ", ".join(f"{h.step} ({h.tool})" for h in event.replay.healed_steps)
        out(
            f"         healed v{healed.version} from v{healed.healed_from}: step {steps} reads"
            " anew; a candidate until a replay of its own verifies"
        )
    elif event.source == "full_llm":
        compiled = await _compiled(bus, event.run_id, 60)
        if compiled is None or compiled.version is None:
            out("         the compiler skipped this trace")
            return
        version = compiled.version
        report.versions.append(version)
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id=TASK_ID), ExecutorHealth)
        out(
            f"         compiled v{version}: {health.total_steps} steps "
            f"({health.deterministic_steps} deterministic, {health.templated_steps} "
            f"templated, {health.llm_steps} small-model)"
        )


def _summary(report: DemoReport, health: ExecutorHealth, out: Printer) -> None:
    out("")
    out(f"answer of the last run:\n{report.rows[-1].result}")
    out("")
    saved = report.all_full_cost_usd - report.total_cost_usd
    share = saved / report.all_full_cost_usd * 100 if report.all_full_cost_usd else 0.0
    per_layout = ", ".join(
        f"{layout} ${cost:.6f}" for layout, cost in report.full_run_cost_by_layout.items()
    )
    out(
        f"total cost ${report.total_cost_usd:.6f} vs ${report.all_full_cost_usd:.6f} for the "
        f"same {len(report.rows)} runs all as full LLM runs (each at its layout's full run: "
        f"{per_layout}): {share:.1f}% saved"
    )
    # success_count is the current version's; the savings are the task's, every version's.
    out(
        f"the site changes cost {report.full_runs_after_change} full run(s); executor now "
        f"v{health.version} ({health.status}, replayed {health.success_count} time(s)); "
        f"replays of every version saved ${health.total_cost_saved_usd:.6f}"
    )
