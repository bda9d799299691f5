"""Drift: replayed answers on pages that changed meaning without breaking, against
always-full runs on the same page states.

The stack runs in-process as in the cost benchmark (bench_cost.py: an embedded NATS,
every service, real Chromium, SQLite, the stand-in model over HTTP). Each drift task
(services/dev/bench/drift/) gets its own local site and goes through its schedule: a
fresh edition of the data every run, silent drifts (the markup a compiled executor reads
still matches, the values mean something else, and the page says so), a breaking
redesign, and clean runs between them. For every run, on the same page state:

  rote      the task under its own id: run 1 is a full run that compiles v1; later runs
            replay, or fall back to a full run when the replay breaks;
  baseline  the same prompt as a one-time task: always a full run by the stand-in, which
            reads the page's notes as a careful large model does.

Both answers are judged against the truth computed from the site's data
(drift/truth.py, drift/judge.py). Targets (issue 31): silent drifts caught before a
wrong answer is delivered >= 95 %; wrong answers delivered <= 1 % of replays;
verification <= 5 % of a full run per replay; median replay cost <= 1 % of a full run.
False alarms on clean replays are reported. Quick mode: 6 tasks, 4 runs each (2 clean,
then a silent drift for 2 runs); run 1's full loop stands as its own baseline.

    python -m services.dev.bench.bench_drift [--quick]
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from pathlib import Path

import anyio

from services.dev.bench.bench_cost import SERVICES, standin_env
from services.dev.bench.cost_runs import Watcher
from services.dev.bench.drift.tasks import QUICK_TASKS, TASKS, TASKS_BY_ID, DriftTask
from services.dev.bench.drift_runs import DriftRecord, drive
from services.dev.bench.drift_summary import summarise
from services.dev.bench.harness import Section, render_table, to_json
from services.dev.standin.server import StandinServer
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.logs import configure_logging
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

CONCURRENT_TASKS = 3  # full mode: tasks in flight at once (two runs each)


def plan(quick: bool) -> list[DriftTask]:
    return [TASKS_BY_ID[t] for t in QUICK_TASKS] if quick else list(TASKS)


async def run(quick: bool) -> Section:
    began = time.perf_counter()
    tasks = plan(quick)
    concurrency = len(tasks) if quick else CONCURRENT_TASKS
    records: dict[str, list[DriftRecord]] = {}
    with contextlib.ExitStack() as resources:
        tmp = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="rote-bench-drift-")))
        standin = resources.enter_context(StandinServer())
        # Started on the event loop's thread (see bench_cost.py): it dies with its thread.
        nats = resources.enter_context(EmbeddedNats(tmp / "nats", port=free_port()))
        settings = Settings(
            nats_url=nats.url,
            data_dir=tmp / "data",
            event_store="sqlite",
            log_format="json",
            log_level="warning",
            runner_slots=2 * concurrency,
            replay_backoff_s=0.2,
        )
        settings.data_dir.mkdir(parents=True)
        with standin_env(standin.url):
            async with open_stack(settings, SERVICES) as stack:
                startup_s = time.perf_counter() - began
                watcher = Watcher(stack.bus)
                await watcher.start()
                limiter = anyio.CapacityLimiter(concurrency)

                async def one(task: DriftTask) -> None:
                    async with limiter:
                        records[task.task_id] = await drive(watcher, task, quick)

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


def kinds_table(section: Section) -> str:
    cols = ["kind", "events", "caught", "broke", "flagged", "right", "wrong", "full",
            "wrong_answers"]  # fmt: skip
    rows = [cols] + [[str(row[c]) for c in cols] for row in section.details["kinds"]]
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
    print(kinds_table(section))
