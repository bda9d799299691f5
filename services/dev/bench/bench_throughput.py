"""Replayed runs per second, with 1 and then 2 runner processes.

The executor replays two no-op tool steps, so this measures rote's own machinery per
run: the work queue, the executor lookup, the tool calls through the tools service,
the run events, the transcript. tools and compiler run as their own processes, like
the runners; the driver only enqueues requests and counts completions.
Target: >= 100 replayed runs/s with one runner process (2 cores).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import anyio
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ActiveExecutor, ExecutorRef
from contracts.runs import RunEvent, RunRequest
from contracts.tasks import TaskSpec
from contracts.tools import ToolMetadata
from contracts.traces import Trace, TraceCaptured, TraceStep
from services.dev.bench.harness import Metric, Section
from services.dev.bench.processes import serving
from services.kernel.bus import Bus, connect, routed
from services.kernel.codec import decode, encode
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.ids import new_run_id
from services.kernel.streams import ensure_streams

TASK = "bench-noop"
SLOTS = "32"


def _trace(spec: TaskSpec) -> Trace:
    steps = [
        TraceStep(
            index=i, tool="noop", input={"echo": word}, output=word, preview=word,
            status="ok", metadata=ToolMetadata(),
        )
        for i, word in enumerate(["alpha", "beta"])
    ]  # fmt: skip
    return Trace(
        run_id="bench-source", task_id=TASK, task=spec, steps=steps, answer="alpha, beta",
        model="claude-sonnet-5-5", cost_usd=0.01, captured_at=utc_now(),
    )  # fmt: skip


async def _compile(bus: Bus, spec: TaskSpec) -> None:
    await bus.publish_event(
        s.trace_captured(TASK, "bench-source"), TraceCaptured(trace=_trace(spec)), msg_id="bench-t"
    )
    with anyio.fail_after(30):
        while True:
            active = await bus.request(
                s.EXECUTORS_ACTIVE, ExecutorRef(task_id=TASK), ActiveExecutor, timeout=5
            )
            if active.executor is not None:
                return
            await anyio.sleep(0.2)


async def _drive(bus: Bus, spec: TaskSpec, runs: int) -> tuple[float, int]:
    """Enqueue `runs` runs at once; seconds until the last completes, and how many were
    replays."""
    done = anyio.Event()
    ids = {new_run_id() for _ in range(runs)}
    completed: set[str] = set()
    replays = 0

    async def on_done(msg: Msg) -> None:
        nonlocal replays
        event = decode(msg.data, RunEvent)
        if event.run_id in ids and event.run_id not in completed:
            completed.add(event.run_id)
            replays += event.source == "executor"
            if len(completed) == len(ids):
                done.set()

    sub = await bus.nc.subscribe(s.run_events_of(task_id=TASK, event="completed"), cb=on_done)
    await routed(bus.nc)
    started = time.perf_counter()
    acks = []
    for run_id in ids:
        request = RunRequest(run_id=run_id, task_id=TASK, spec=spec, requested_at=utc_now())
        acks.append(
            await bus.js.publish_async(
                s.WORK_RUNS, encode(request), headers={"Nats-Msg-Id": run_id}
            )
        )
    for ack in acks:
        await ack
    with anyio.fail_after(300):
        await done.wait()
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return elapsed, replays


async def run(quick: bool) -> Section:
    runs, warmup = (300, 50) if quick else (2000, 200)
    spec = TaskSpec(name=TASK, prompt="no-op replay", allowed_tools=["noop"])
    rates: dict[int, float] = {}
    replay_share: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="rote-bench-") as tmp:
        data = Path(tmp)
        with EmbeddedNats(data / "nats", port=free_port()) as server:
            bus = await connect(server.url, name="bench-driver")
            try:
                await ensure_streams(bus.js)
                with serving(["tools", "compiler"], server.url, data, ROTE_EVENT_STORE="sqlite"):
                    await _compile(bus, spec)
                    for processes in (1, 2):
                        with serving(
                            ["runner"] * processes, server.url, data, ROTE_RUNNER_SLOTS=SLOTS
                        ):
                            await _drive(bus, spec, warmup)
                            elapsed, replays = await _drive(bus, spec, runs)
                        rates[processes] = runs / elapsed
                        replay_share[processes] = replays / runs
            finally:
                await bus.close()
    scaling = rates[2] / rates[1]
    return Section(
        name="throughput",
        metrics=[
            Metric(
                "replayed runs/s, 1 runner process", rates[1], "runs/s", ">= 100", rates[1] >= 100
            ),
            Metric("replayed runs/s, 2 runner processes", rates[2], "runs/s"),
            Metric("scaling 2 processes / 1", scaling, "x"),
            Metric(
                "runs served by replay",
                min(replay_share.values()) * 100,
                "%",
                "100",
                min(replay_share.values()) == 1.0,
            ),
        ],
        notes=(
            f"{runs} runs enqueued at once, each replaying 2 no-op tool steps; "
            f"{SLOTS} slots per runner process; tools and compiler in their own processes; "
            "all processes share this machine's cores with NATS"
        ),
        details={"runs": runs, "rates": rates},
    )


if __name__ == "__main__":
    import json
    from dataclasses import asdict

    from services.dev.bench.harness import render_table

    section = anyio.run(run, False, backend="asyncio")
    print(json.dumps(asdict(section), indent=2))
    print(render_table([section]))
