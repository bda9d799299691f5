"""nats-server stopped for a few seconds (SIGTERM, a clean stop; SIGKILL, a crash) while
runs are in the middle of their form task, then started again on the same port and
store: the services reconnect, and each form reaches the site once, or its run ends
`needs_attention` with its task paused."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.chaos.conftest import RestartableNats, open_rig
from tests.chaos.ledger import Case, assert_targets
from tests.chaos.model import GatedStandin
from tests.chaos.rig import Rig
from tests.chaos.site import CountingSite, Hold

pytestmark = [pytest.mark.anyio, pytest.mark.chaos, pytest.mark.browser, pytest.mark.slow]

# How long NATS stays down, and when in the outage the held request is let go.
DOWN_S = 4.0
RELEASE_AFTER_S = 1.0
# NATS is up at least this long between two outages: each is its own outage, not one
# long flapping one (leases renew every 5 s and lapse after two misses in a row).
UP_S = 6.0
# Where the runs are when NATS goes (each outage hits one full run and one replay):
# - reply_lost: their submit in flight, answered by the site while NATS is down, so the
#   tools service's reply has nowhere to go;
# - reply_after_restart: their submit in flight across the whole outage, answered
#   once NATS is back;
# - before_submit: opening the form (a replay) or deciding to submit (a full run);
# - after_submit: their submit done, reading the page (a full run's next model call is
#   held; a replay is caught as its read starts, and may be finishing).
VARIANTS = ("reply_lost", "reply_after_restart", "before_submit", "after_submit")
SIGNALS = (signal.SIGTERM, signal.SIGKILL)
PLANNED_FAULTS = len(VARIANTS) * len(SIGNALS)


def arm(rig: Rig, case: Case, full: bool, variant: str) -> Hold | None:
    """The hold that keeps the case's run at the variant's point (None: a replay after
    its submit, caught by the tools service's events instead)."""
    if variant in ("reply_lost", "reply_after_restart"):
        return rig.site.hold("POST", case.key)
    if variant == "before_submit":
        if full:
            return rig.model.hold_call(case.key, rig.model.calls_of(case.key) + 2)
        return rig.site.hold("GET", case.key)
    if full:
        return rig.model.hold_call(case.key, rig.model.calls_of(case.key) + 3)
    return None


async def outage(
    rig: Rig, nats: RestartableNats, sig: signal.Signals, variant: str, cases: list[Case]
) -> None:
    holds: list[Hold] = []
    for case in cases:
        full = case.name.startswith("full")
        hold = arm(rig, case, full, variant)
        if hold is None:  # a replay after its submit: caught as its read starts
            hold = await rig.on_tool(case, "browser_read_page", "started", lambda: None)
        await rig.start(case)
        holds.append(hold)
    for hold, case in zip(holds, cases, strict=True):
        await rig.reached(hold, [case], variant)
    nats.stop(sig)
    rig.faults.injected(f"nats_{sig.name.lower()}", variant)
    if variant != "reply_after_restart":
        await anyio.sleep(RELEASE_AFTER_S)
        for hold in holds:
            hold.release()
        await anyio.sleep(DOWN_S - RELEASE_AFTER_S)
    else:
        await anyio.sleep(DOWN_S)
    await nats.start()
    if variant == "reply_after_restart":
        await anyio.sleep(RELEASE_AFTER_S)
        for hold in holds:
            hold.release()


async def test_nats_down_mid_action_does_no_action_twice(
    nats: RestartableNats, site: CountingSite, model: GatedStandin, tmp_path: Path
) -> None:
    # An ack wait of 10 s (a third of the default): a run whose heartbeats an outage
    # interrupts is not redelivered for that alone.
    async with open_rig(
        "nats_outages", tmp_path, nats.url, site, model, runners=4, runner_slots=4, ack_wait_s=10.0
    ) as rig:
        plan = [(sig, variant) for variant in VARIANTS for sig in SIGNALS]
        replays: dict[int, Case] = {}

        async def prepare(i: int, name: str) -> None:
            replays[i] = await rig.prepared_replay(f"replay/{name}", f"no-r{i}")

        async with anyio.create_task_group() as tg:
            for i, (sig, variant) in enumerate(plan):
                tg.start_soon(prepare, i, f"{variant}/{sig.name}")
        for i, (sig, variant) in enumerate(plan):
            full = await rig.task(f"full/{variant}/{sig.name}", f"no-f{i}")
            await anyio.sleep(max(0.0, nats.up_since + UP_S - time.monotonic()))
            await outage(rig, nats, sig, variant, [full, replays[i]])
        verdicts = await rig.verdicts()
    assert_targets("nats outages", verdicts, rig.faults, PLANNED_FAULTS)
