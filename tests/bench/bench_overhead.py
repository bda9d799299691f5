"""Replay overhead per deterministic step, as a ratio to a raw NATS round trip.

A replayed tool step goes runner -> tools service -> (tool events to JetStream) ->
runner, plus the replay's own bookkeeping (references, expectations, transcript). With
a no-op tool that is pure orchestration. Both are measured in one run, on one
connection, so the ratio does not depend on how fast this machine is.
Target: a replayed step costs at most 2 raw round trips.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import anyio

from contracts.base import utc_now
from contracts.executors import Executor, ExecutorStats, ResultStep, ToolStep
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool
from services.kernel.codec import encode
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.runner.ports import RunScope
from services.runner.replay import Replayer
from services.runner.service import bus_ports
from services.runner.transcript import TranscriptRecorder
from tests.bench.harness import Metric, Section, percentile

ECHO = "bench.echo"


def _executor(steps: int) -> Executor:
    tool_steps = [ToolStep(index=i, tool="noop", input={"echo": f"step {i}"}) for i in range(steps)]
    return Executor(
        task_id="bench",
        version=1,
        source_run_id="bench",
        compiled_at=utc_now(),
        steps=[*tool_steps, ResultStep(index=steps, mode="template", template="done")],
        stats=ExecutorStats(
            total_steps=steps + 1,
            deterministic_steps=steps + 1,
            templated_steps=0,
            llm_steps=0,
            estimated_replay_cost_usd=0.0,
            source_run_cost_usd=0.0,
        ),
    )


async def run(quick: bool) -> Section:
    rounds, steps = (8, 40) if quick else (60, 100)
    with (
        tempfile.TemporaryDirectory(prefix="rote-bench-") as tmp,
        EmbeddedNats(Path(tmp) / "nats", port=free_port()) as server,
    ):
        settings = Settings(nats_url=server.url, data_dir=Path(tmp), event_store="memory")
        async with open_stack(settings, ["tools"]) as stack:
            bus = stack.bus
            # The raw round trip carries a payload of the same size as a tool call.
            payload = encode(
                ExecTool(
                    run_id="bench",
                    allowed_tools=["noop"],
                    tool="noop",
                    input={"echo": "step 0"},
                )
            )

            async def echo(msg: object) -> None:
                await msg.respond(msg.data)  # type: ignore[attr-defined]

            await bus.nc.subscribe(ECHO, cb=echo)
            await bus.nc.flush()
            ports = bus_ports(bus)
            spec = TaskSpec(name="bench", prompt="bench", allowed_tools=["noop"])
            executor = _executor(steps)

            async def raw_batch() -> list[float]:
                times = []
                for _ in range(steps):
                    t = time.perf_counter()
                    await bus.nc.request(ECHO, payload, timeout=5)
                    times.append(time.perf_counter() - t)
                return times

            async def replay(i: int) -> float:
                scope = RunScope(
                    spec=spec, ports=ports, run_id=f"bench{i}", task_id="bench", attempt=1,
                    transcript=TranscriptRecorder(f"bench{i}", "bench"),
                )  # fmt: skip
                replayer = Replayer(executor, scope)
                t = time.perf_counter()
                result = await replayer.run()
                elapsed = time.perf_counter() - t
                assert result.ok and result.answer == "done", result.reason
                return elapsed / steps

            await raw_batch()  # warm up both paths
            await replay(0)
            # Interleaved, so drift in the machine's speed hits both alike: each
            # round's ratio compares a replay with the raw round trips just before it.
            raw: list[float] = []
            per_step: list[float] = []
            ratios: list[float] = []
            for i in range(1, rounds + 1):
                batch = await raw_batch()
                step = await replay(i)
                raw.extend(batch)
                per_step.append(step)
                ratios.append(step / statistics.median(batch))
            await anyio.sleep(0.5)  # let the last tool events reach the stream
    raw_p50 = statistics.median(raw)
    step_p50 = statistics.median(per_step)
    ratio = statistics.median(ratios)
    return Section(
        name="overhead",
        metrics=[
            Metric("raw nats request/reply p50", raw_p50 * 1e6, "us"),
            Metric("raw nats request/reply p95", percentile(raw, 95) * 1e6, "us"),
            Metric("replayed no-op step p50", step_p50 * 1e6, "us"),
            Metric(
                "replayed step / raw round trip (median of rounds)",
                ratio,
                "x",
                target="<= 2",
                ok=ratio <= 2.0,
            ),
        ],
        notes=(
            f"{rounds} rounds, each {steps} raw request/replies then a replay of {steps} "
            "no-op tool steps through the tools service (tool events to JetStream), same "
            "connection; the ratio is the median of the rounds' ratios"
        ),
        details={"ratios": [round(r, 3) for r in ratios]},
    )


if __name__ == "__main__":
    import json
    from dataclasses import asdict

    from tests.bench.harness import render_table

    section = anyio.run(run, False, backend="asyncio")
    print(json.dumps(asdict(section), indent=2))
    print(render_table([section]))
