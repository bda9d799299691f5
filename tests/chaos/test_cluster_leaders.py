"""A 3-node NATS cluster (infra/nats/cluster, streams at R3) losing the node that leads
ROTE_WORK (the run requests) or ROTE_RUNS (the run events) while runs are in flight,
including right as a run finishes: the killed node is started again a few seconds later
and catches up. Each form reaches the site once, or its run ends `needs_attention`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from contracts import subjects as s
from tests.chaos.cluster import Cluster
from tests.chaos.conftest import open_rig
from tests.chaos.ledger import Case, assert_targets
from tests.chaos.model import GatedStandin
from tests.chaos.rig import Rig
from tests.chaos.site import CountingSite

pytestmark = [pytest.mark.anyio, pytest.mark.chaos, pytest.mark.browser, pytest.mark.slow]

# When the killed node is started again.
DOWN_S = 3.0
# Where the runs are when their stream's leader dies (each kill hits a full run and a
# replay of their own):
# - mid_submit: their submits in flight (held by the site, let go a second later);
# - as_finishing: the full run's last model call held and let go with the kill, the
#   replay caught as its read's answer goes out: their terminal events and acks meet
#   the election;
# - queued: just asked for, on their way through the work queue.
VARIANTS = ("mid_submit", "as_finishing", "queued")
STREAMS = (s.STREAM_WORK, s.STREAM_RUNS)
# Every variant on each stream, and the two where the runs act again (the races differ
# from one kill to the next).
PLAN = [
    (stream, variant) for variant in (*VARIANTS, "mid_submit", "as_finishing") for stream in STREAMS
]
PLANNED_FAULTS = len(PLAN)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    nodes = Cluster(tmp_path / "cluster")
    try:
        await nodes.start()
        yield nodes
    finally:
        nodes.stop()


async def kill_leader(
    rig: Rig, cluster: Cluster, stream: str, variant: str, full: Case, replay: Case
) -> None:
    leader = await cluster.leader_of(rig.bus, stream)
    where = f"{stream}/{variant}"

    def kill() -> None:
        cluster.kill(leader)
        rig.faults.injected("leader_kill", where)

    if variant == "mid_submit":
        holds = [rig.site.hold("POST", case.key) for case in (full, replay)]
        for case in (full, replay):
            await rig.start(case)
        for hold, case in zip(holds, (full, replay), strict=True):
            await rig.reached(hold, [case], variant)
        kill()
        await anyio.sleep(1.0)
        for hold in holds:
            hold.release()
    elif variant == "as_finishing":
        last_call = rig.model.hold_call(full.key, rig.model.calls_of(full.key) + 4)
        await rig.start(full)
        await rig.reached(last_call, [full], "its last model call")

        def kill_and_let_go() -> None:
            kill()
            last_call.release()

        fired = await rig.on_tool(replay, "browser_read_page", "finished", kill_and_let_go)
        await rig.start(replay)
        if not await rig.reached(fired, [replay], "its read's answer"):
            kill_and_let_go()
    else:
        for case in (full, replay):
            await rig.start(case)
        kill()
    await anyio.sleep(DOWN_S)
    cluster.spawn(leader)
    await cluster.wait_healthy()


async def test_losing_a_stream_leader_does_no_action_twice(
    cluster: Cluster, site: CountingSite, model: GatedStandin, tmp_path: Path
) -> None:
    async with open_rig(
        "cluster_leaders",
        tmp_path,
        cluster.url,
        site,
        model,
        runners=3,
        runner_slots=4,
        ack_wait_s=10.0,
        replicas=3,
    ) as rig:
        plan = PLAN
        replays: dict[int, Case] = {}

        async def prepare(i: int, name: str) -> None:
            replays[i] = await rig.prepared_replay(f"replay/{name}", f"cl-r{i}")

        async with anyio.create_task_group() as tg:
            for i, (stream, variant) in enumerate(plan):
                tg.start_soon(prepare, i, f"{stream}/{variant}")
        for i, (stream, variant) in enumerate(plan):
            full = await rig.task(f"full/{stream}/{variant}", f"cl-f{i}")
            await kill_leader(rig, cluster, stream, variant, full, replays[i])
        verdicts = await rig.verdicts()
    assert_targets("cluster leaders", verdicts, rig.faults, PLANNED_FAULTS)
