"""Cost: rote against always-full-LLM runs, on the same page states.

The whole stack runs in-process (an embedded NATS with JetStream; system, llm, tools,
compiler, tracer, runner; real Chromium; SQLite event stores in a temporary data dir)
with the stand-in model over HTTP through the anthropic SDK. Each corpus task
(services/dev/bench/corpus/) gets its own local site and runs on a schedule: the content
edition advances every run, and the layout changes before the runs the task names (a
redesign). For every run, on the same page state:

  rote      the task under its own id: run 1 is a full LLM run that compiles v1; later
            runs replay the active executor, or fall back to a full run (and compile
            the next version) when the replay breaks;
  baseline  the same prompt under a one-time task id (trigger `once`, which the compiler
            never compiles): always a full LLM run. Its answer is also checked against
            what services/dev/bench/corpus_oracle.py expects from the page, offline.

Costs are the runner's own accounting (tokens x list prices) from each run's completed
event. Targets: median replay cost <= 1 % of the full run on the same page state; answer
agreement (replay == baseline) >= 99 %; exactly 1 full run per layout change that breaks
the executor; a projected month of hourly runs with a weekly layout change <= 3 % of
always-full. Quick mode (3 tasks x 4 runs, one redesign) lets a rote run that ran the
full loop stand as its own baseline; the full benchmark runs every baseline and checks
that such pairs are the same conversation.

    python -m services.dev.bench.bench_cost [--quick]

The runs are driven and recorded in cost_runs.py, their numbers made in cost_summary.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio

from services.dev.bench.corpus.tasks import TASKS, TASKS_BY_ID, CorpusTask
from services.dev.bench.cost_runs import RunRecord, Watcher, drive
from services.dev.bench.cost_summary import summarise
from services.dev.bench.harness import Section, render_table, to_json
from services.dev.standin.server import StandinServer
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.logs import configure_logging
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

SERVICES = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
RUNS = 10
QUICK_RUNS = 4
QUICK_TASKS = ("gazette-top3", "kitchen-stock", "townhall-signup")
QUICK_CHANGES = (3,)  # quick mode: one redesign, before run 3
CONCURRENT_TASKS = 3  # tasks in flight at once (one run each); Chromium shares 2 cores


@contextlib.contextmanager
def standin_env(url: str) -> Iterator[None]:
    """Point the anthropic SDK at the stand-in for the stack's lifetime, then restore."""
    names = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["ANTHROPIC_BASE_URL"] = url
    os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-standin-0000"
    os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def plan(quick: bool) -> tuple[list[CorpusTask], int, tuple[int, ...] | None]:
    if quick:
        return [TASKS_BY_ID[t] for t in QUICK_TASKS], QUICK_RUNS, QUICK_CHANGES
    return list(TASKS), RUNS, None


async def run(quick: bool) -> Section:
    began = time.perf_counter()
    tasks, runs, changes = plan(quick)
    concurrency = len(tasks) if quick else CONCURRENT_TASKS
    records: dict[str, list[RunRecord]] = {}
    with contextlib.ExitStack() as resources:
        tmp = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="rote-bench-cost-")))
        standin = resources.enter_context(StandinServer())
        # Started here, on the event loop's thread, rather than by open_stack (which starts
        # it from a worker thread): the server dies with the thread that started it.
        nats = resources.enter_context(EmbeddedNats(tmp / "nats", port=free_port()))
        settings = Settings(
            nats_url=nats.url,
            data_dir=tmp / "data",
            event_store="sqlite",
            log_format="json",
            log_level="warning",
            # A rote run and its baseline per task in flight.
            runner_slots=2 * concurrency,
            # The wait before retrying a failed replay step: latency only, never cost.
            replay_backoff_s=0.2,
        )
        settings.data_dir.mkdir(parents=True)
        with standin_env(standin.url):
            async with open_stack(settings, SERVICES) as stack:
                startup_s = time.perf_counter() - began
                watcher = Watcher(stack.bus)
                await watcher.start()
                limiter = anyio.CapacityLimiter(concurrency)

                async def one(task: CorpusTask) -> None:
                    async with limiter:
                        records[task.task_id] = await drive(
                            watcher, task, runs, changes, shortcut=quick
                        )

                try:
                    async with anyio.create_task_group() as tg:
                        for task in tasks:
                            tg.start_soon(one, task)
                finally:
                    await watcher.stop()
    flat = [r for t in tasks for r in records.get(t.task_id, [])]
    section = summarise(tasks, flat, time.perf_counter() - began, quick)
    section.details["startup_s"] = round(startup_s, 2)
    return section


def task_table(section: Section) -> str:
    cols = ["task", "kind", "full_cost_usd", "replay_cost_usd", "replay_over_full", "runs",
            "replays", "fallbacks", "agreement"]  # fmt: skip
    rows = [cols] + [
        ["" if row[c] is None else str(row[c]) for c in cols] for row in section.details["tasks"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    configure_logging("json", "warning")
    quick = "--quick" in sys.argv
    began = time.perf_counter()
    section = anyio.run(run, quick, backend="asyncio")
    print(to_json([section], time.perf_counter() - began, quick))
    print(render_table([section]))
    print()
    print(task_table(section))
