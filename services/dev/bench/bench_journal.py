"""The effect journal's cost per action step, as a ratio to a raw NATS round trip.

Every action a run takes is journaled (services/runner/README.md#effects-once): the
runner records its intent and its outcome in `rote_effects`, and the tools service
records the call it runs under its idempotency key in `rote_tool_calls`. Each round
replays two executors of STEPS `file_write` steps through the tools service, one with
the journal and one without (no journal, no idempotency key), in alternating order,
after raw request/replies on the same connection. The journal's cost per action step is
the difference of the two replays per step; a round's ratio is that over its raw p50.
No target: the figure is what the guarantee costs.

    python -m services.dev.bench.bench_journal [--quick]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import anyio
from nats.aio.msg import Msg

from contracts.base import utc_now
from contracts.executors import Executor, ExecutorStats, ResultStep, ToolStep
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool
from services.dev.bench.harness import QUARTILE_METHOD, Metric, Section, percentile, quartiles
from services.kernel.bus import Bus, routed
from services.kernel.codec import encode
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.runner.adapters import KvEffects, bus_ports
from services.runner.effects import RunEffects
from services.runner.ports import RunScope
from services.runner.replay import Replayer
from services.runner.transcript import TranscriptRecorder

ECHO = "bench.journal.echo"
STEPS = 40
RAW_BATCH = 40
QUICK_ROUNDS, FULL_ROUNDS = 8, 30


def _executor(root: Path) -> Executor:
    writes = [
        ToolStep(
            index=i,
            tool="file_write",
            input={"path": str(root / f"out-{i}.txt"), "content": f"step {i}"},
        )
        for i in range(STEPS)
    ]
    return Executor(
        task_id="bench",
        version=1,
        source_run_id="bench",
        compiled_at=utc_now(),
        steps=[*writes, ResultStep(index=STEPS, mode="template", template="done")],
        stats=ExecutorStats(
            total_steps=STEPS + 1,
            deterministic_steps=STEPS + 1,
            templated_steps=0,
            llm_steps=0,
            estimated_replay_cost_usd=0.0,
            source_run_cost_usd=0.0,
        ),
    )


class _Rig:
    def __init__(self, bus: Bus, root: Path) -> None:
        self.bus = bus
        self.ports = bus_ports(bus)
        self.journal = KvEffects(bus)
        self.spec = TaskSpec(name="bench", prompt="bench", allowed_tools=["file_write"])
        self.executor = _executor(root)
        self.payload = encode(
            ExecTool(
                run_id="bench",
                allowed_tools=["file_write"],
                tool="file_write",
                input={"path": str(root / "out-0.txt"), "content": "step 0"},
            )
        )
        self.replays = 0

    async def start(self) -> None:
        async def echo(msg: Msg) -> None:
            await msg.respond(msg.data)

        await self.bus.nc.subscribe(ECHO, cb=echo)
        await routed(self.bus.nc)

    async def raw_batch(self) -> list[float]:
        times = []
        for _ in range(RAW_BATCH):
            t = time.perf_counter()
            await self.bus.nc.request(ECHO, self.payload, timeout=5)
            times.append(time.perf_counter() - t)
        return times

    async def replay(self, journaled: bool) -> float:
        self.replays += 1
        run_id = f"bench{self.replays}"
        effects = RunEffects(run_id, 1, self.journal, self.ports.call_status) if journaled else None
        scope = RunScope(
            spec=self.spec, ports=self.ports, run_id=run_id, task_id="bench", attempt=1,
            transcript=TranscriptRecorder(run_id, "bench"), effects=effects,
        )  # fmt: skip
        t = time.perf_counter()
        result = await Replayer(self.executor, scope).run()
        elapsed = time.perf_counter() - t
        assert result.ok, result.reason
        return elapsed


async def _measure(rig: _Rig, rounds: int) -> dict[str, list[float]]:
    await rig.raw_batch()
    await rig.replay(True)  # warm up both paths
    await rig.replay(False)
    out: dict[str, list[float]] = {"raw": [], "raw_p50": [], "cost": [], "ratio": [], "plain": []}
    for i in range(rounds):
        batch = await rig.raw_batch()
        order = (True, False) if i % 2 == 0 else (False, True)
        took = {journaled: await rig.replay(journaled) for journaled in order}
        batch += await rig.raw_batch()
        raw_p50 = statistics.median(batch)
        cost = (took[True] - took[False]) / STEPS
        out["raw"] += batch
        out["raw_p50"].append(raw_p50)
        out["cost"].append(cost)
        out["ratio"].append(cost / raw_p50)
        out["plain"].append(took[False] / STEPS)
    return out


async def run(quick: bool) -> Section:
    rounds = QUICK_ROUNDS if quick else FULL_ROUNDS
    with (
        tempfile.TemporaryDirectory(prefix="rote-bench-") as tmp,
        EmbeddedNats(Path(tmp) / "nats", port=free_port()) as server,
    ):
        root = Path(tmp) / "files"
        root.mkdir()
        settings = Settings(
            nats_url=server.url, data_dir=Path(tmp), event_store="memory", path_roots=(str(root),)
        )
        async with open_stack(settings, ["tools"]) as stack:
            rig = _Rig(stack.bus, root)
            await rig.start()
            measured = await _measure(rig, rounds)
            await anyio.sleep(0.5)  # let the last tool events reach the stream
    return _section(rounds, measured)


def _section(rounds: int, m: dict[str, list[float]]) -> Section:
    ratio = statistics.median(m["ratio"])
    q1, _, q3 = quartiles(m["ratio"])
    metrics = [
        Metric("raw nats request/reply p50", statistics.median(m["raw"]) * 1e6, "us"),
        Metric("raw nats request/reply p95", percentile(m["raw"], 95) * 1e6, "us"),
        Metric("action step without the journal, median of rounds",
               statistics.median(m["plain"]) * 1e6, "us"),
        Metric("journal cost per action step, median of rounds",
               statistics.median(m["cost"]) * 1e6, "us"),
        Metric("journal cost per action step / raw round trip", ratio, "x"),
        Metric("rounds' ratio, 1st quartile", q1, "x"),
        Metric("rounds' ratio, 3rd quartile", q3, "x"),
    ]  # fmt: skip
    return Section(
        name="journal",
        metrics=metrics,
        notes=(
            f"{rounds} rounds; each replays {STEPS} file_write steps through the tools "
            "service with the effect journal (runner intent + outcome in rote_effects, "
            "tools-side record in rote_tool_calls) and without, in alternating order, "
            f"between {2 * RAW_BATCH} raw request/replies on the same connection; the cost "
            "is the difference per step, the ratio that over the round's raw p50 "
            f"(quartiles: {QUARTILE_METHOD}). No target: what effects-once costs"
        ),
        details={
            "steps": STEPS,
            "rounds": rounds,
            "quartile_method": QUARTILE_METHOD,
            "ratios": m["ratio"],
            "cost_us": [round(c * 1e6, 1) for c in m["cost"]],
            "raw_p50_us": [round(r * 1e6, 1) for r in m["raw_p50"]],
        },
    )


if __name__ == "__main__":
    import json
    import sys
    from dataclasses import asdict

    from services.dev.bench.harness import render_table
    from services.kernel.logs import configure_logging

    configure_logging("json", "warning")  # as `rote bench`: a log line per step would be timed
    section = anyio.run(run, "--quick" in sys.argv, backend="asyncio")
    print(json.dumps(asdict(section), indent=2))
    print(render_table([section]))
