"""Replay overhead per deterministic step, as a ratio to a raw NATS round trip.

A replayed tool step goes runner -> tools service -> (tool events to JetStream) ->
runner, plus the replay's own bookkeeping (references, expectations, transcript). With
a no-op tool that is pure orchestration. A replay also has a fixed cost (setup, the
result step) that does not grow with its steps, so dividing a replay's time by its step
count would charge a share of it to every step, more the fewer steps the executor has.
Instead each round times replays of SHORT and LONG (= 2 x SHORT) steps: a step's cost is
the slope (T(LONG) - T(SHORT)) / (LONG - SHORT), the fixed cost the intercept, both
reported. The raw round trips are timed in the same round, on the same connection, so
the ratio does not depend on how fast this machine is.
Target: a replayed step costs at most 2 raw round trips.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
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
from services.runner.adapters import bus_ports
from services.runner.ports import RunScope
from services.runner.replay import Replayer
from services.runner.transcript import TranscriptRecorder

ECHO = "bench.echo"
# The same step counts in both modes, so a quick result measures the same thing as a
# full one; quick mode only runs fewer rounds.
SHORT, LONG = 100, 200
QUICK_ROUNDS, FULL_ROUNDS = 40, 100
TARGET_RATIO = 2.0


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


class _Rig:
    """What one round times: raw request/replies on the stack's connection, and replays of
    the SHORT and LONG executors through the tools service."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        # The raw round trip carries a payload of the same size as a tool call.
        self.payload = encode(
            ExecTool(
                run_id="bench",
                allowed_tools=["noop"],
                tool="noop",
                input={"echo": "step 0"},
            )
        )
        self.ports = bus_ports(bus)
        self.spec = TaskSpec(name="bench", prompt="bench", allowed_tools=["noop"])
        self.executors = {n: _executor(n) for n in (SHORT, LONG)}
        self.replays = 0

    async def start(self) -> None:
        async def echo(msg: Msg) -> None:
            await msg.respond(msg.data)

        await self.bus.nc.subscribe(ECHO, cb=echo)
        await routed(self.bus.nc)

    async def raw_batch(self) -> list[float]:
        times = []
        for _ in range(SHORT):
            t = time.perf_counter()
            await self.bus.nc.request(ECHO, self.payload, timeout=5)
            times.append(time.perf_counter() - t)
        return times

    async def replay(self, steps: int) -> float:
        self.replays += 1
        run_id = f"bench{self.replays}"
        scope = RunScope(
            spec=self.spec, ports=self.ports, run_id=run_id, task_id="bench", attempt=1,
            transcript=TranscriptRecorder(run_id, "bench"),
        )  # fmt: skip
        replayer = Replayer(self.executors[steps], scope)
        t = time.perf_counter()
        result = await replayer.run()
        elapsed = time.perf_counter() - t
        assert result.ok and result.answer == "done", result.reason
        return elapsed


@dataclass
class _Rounds:
    raw: list[float] = field(default_factory=list)
    raw_p50s: list[float] = field(default_factory=list)
    slopes: list[float] = field(default_factory=list)
    fixed: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


async def _measure(rig: _Rig, rounds: int) -> _Rounds:
    await rig.raw_batch()  # warm up every path
    for steps in (SHORT, LONG):
        await rig.replay(steps)
    # Interleaved, so drift in the machine's speed hits both alike: each round compares
    # its own two replays with the raw round trips timed between them, and alternates
    # which replay goes first.
    out = _Rounds()
    for i in range(rounds):
        times: dict[int, float] = {}
        batch: list[float] = []
        for steps in (SHORT, LONG) if i % 2 == 0 else (LONG, SHORT):
            batch += await rig.raw_batch()
            times[steps] = await rig.replay(steps)
        slope = (times[LONG] - times[SHORT]) / (LONG - SHORT)
        raw_p50 = statistics.median(batch)
        out.raw.extend(batch)
        out.raw_p50s.append(raw_p50)
        out.slopes.append(slope)
        # Near zero, or below it when a step costs a little more in a longer replay.
        out.fixed.append(times[SHORT] - SHORT * slope)
        out.ratios.append(slope / raw_p50)
    return out


async def run(quick: bool) -> Section:
    rounds = QUICK_ROUNDS if quick else FULL_ROUNDS
    with (
        tempfile.TemporaryDirectory(prefix="rote-bench-") as tmp,
        EmbeddedNats(Path(tmp) / "nats", port=free_port()) as server,
    ):
        settings = Settings(nats_url=server.url, data_dir=Path(tmp), event_store="memory")
        async with open_stack(settings, ["tools"]) as stack:
            rig = _Rig(stack.bus)
            await rig.start()
            measured = await _measure(rig, rounds)
            await anyio.sleep(0.5)  # let the last tool events reach the stream
    return _section(rounds, measured)


def _section(rounds: int, m: _Rounds) -> Section:
    raw, slopes, fixed, ratios = m.raw, m.slopes, m.fixed, m.ratios
    ratio = statistics.median(ratios)
    q1, _, q3 = quartiles(ratios)
    above = sum(r > TARGET_RATIO for r in ratios)
    metrics = [
        Metric("raw nats request/reply p50", statistics.median(raw) * 1e6, "us"),
        Metric("raw nats request/reply p95", percentile(raw, 95) * 1e6, "us"),
        Metric("replay cost per step (slope), median of rounds", statistics.median(slopes) * 1e6,
               "us"),
        Metric("replay fixed cost per replay (intercept), median of rounds",
               statistics.median(fixed) * 1e3, "ms"),
        Metric("replay step slope / raw round trip (median of rounds)", ratio, "x",
               target=f"<= {TARGET_RATIO:g}", ok=ratio <= TARGET_RATIO),
        Metric("rounds' ratio, 1st quartile", q1, "x"),
        Metric("rounds' ratio, 3rd quartile", q3, "x"),
        Metric(f"rounds with ratio above {TARGET_RATIO:g}", above, "rounds"),
    ]  # fmt: skip
    return Section(
        name="overhead",
        metrics=metrics,
        notes=(
            f"{rounds} rounds; each times a replay of {SHORT} and one of {LONG} no-op tool "
            f"steps through the tools service (tool events to JetStream), in alternating "
            f"order, each after {SHORT} raw request/replies on the same connection. A step's "
            f"cost is the slope between the two replays, the fixed cost per replay the "
            f"intercept; a round's ratio is its slope over its raw p50, and the target is "
            f"the median of the rounds' ratios (quartiles: {QUARTILE_METHOD})"
        ),
        details={
            "steps": [SHORT, LONG],
            "rounds": rounds,
            "quartile_method": QUARTILE_METHOD,
            # Unrounded: the quartiles and the count above 2 are checkable from them.
            "ratios": ratios,
            "slope_us": [round(s * 1e6, 1) for s in slopes],
            "fixed_ms": [round(f * 1e3, 3) for f in fixed],
            "raw_p50_us": [round(r * 1e6, 1) for r in m.raw_p50s],
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
