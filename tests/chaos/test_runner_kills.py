"""kill -9 of the runner at every step boundary of a full run and of a replay of the form
task (open the form, fill and submit it, read the page, answer): the run is redelivered
to another runner, and the form must reach the site once, or the run end
`needs_attention` with its task paused."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.chaos.conftest import RestartableNats, open_rig
from tests.chaos.ledger import Case, assert_targets
from tests.chaos.model import GatedStandin
from tests.chaos.procs import ServiceProcess
from tests.chaos.rig import Rig
from tests.chaos.site import CountingSite, Hold

pytestmark = [pytest.mark.anyio, pytest.mark.chaos, pytest.mark.browser, pytest.mark.slow]

BOUNDARIES = ("before_submit", "during_submit", "after_submit", "after_read")
# The model call of the form script (tests/chaos/model.py) that follows each boundary.
NEXT_CALL = {"before_submit": 2, "after_submit": 3, "after_read": 4}
# The runs killed twice: before their submit, then again in the middle of it (the
# redelivered run's submit).
TWICE = ("full", "replay")
PLANNED_FAULTS = 2 * len(BOUNDARIES) + 2 * len(TWICE)
# The runs are at their boundaries together, each on a runner of its own.
RUNNERS = 2 * len(BOUNDARIES) + len(TWICE)


def held_at(rig: Rig, case: Case, full: bool, boundary: str) -> Hold:
    """The hold that stops the case's run at `boundary`. The model decides each step
    of a full run: holding the call after a step keeps the run there. A replay has no
    model between its steps: the form page held keeps it before its submit."""
    if boundary == "during_submit":
        return rig.site.hold("POST", case.key)
    if full:
        return rig.model.hold_call(case.key, rig.model.calls_of(case.key) + NEXT_CALL[boundary])
    assert boundary == "before_submit", boundary
    return rig.site.hold("GET", case.key)


async def kill_at(rig: Rig, case: Case, full: bool, boundary: str) -> bool:
    """Run the case's task and kill -9 its runner at `boundary`. A replay after its
    submit is caught by the tools service's events: killed as its read starts
    (after_submit) or as the read's answer goes out (after_read)."""
    where = f"{'full' if full else 'replay'}/{boundary}"
    if full or boundary in ("before_submit", "during_submit"):
        hold = held_at(rig, case, full, boundary)
        await rig.start(case)
        if not await rig.reached(hold, [case], boundary):
            return False
        rig.kill_runner(await rig.runner_of(case), where)
        hold.release()
        return True
    runner: ServiceProcess | None = None
    fired = await rig.on_tool(
        case,
        "browser_read_page",
        "started" if boundary == "after_submit" else "finished",
        lambda: rig.kill_runner(runner, where),
    )
    await rig.start(case)
    runner = await rig.runner_of(case)
    return await rig.reached(fired, [case], boundary)


async def kill_twice(rig: Rig, case: Case, full: bool) -> None:
    """Killed before its submit, and the redelivered run killed again mid-submit: the
    third delivery finishes it."""
    kind = "full" if full else "replay"
    submit = rig.site.hold("POST", case.key)
    if not await kill_at(rig, case, full, "before_submit"):
        submit.release()
        return
    if await rig.reached(submit, [case], "the redelivered run's submit"):
        rig.kill_runner(await rig.runner_of(case), f"{kind}/twice:during_submit")
        submit.release()


async def test_a_runner_killed_at_any_step_boundary_does_no_action_twice(
    nats: RestartableNats, site: CountingSite, model: GatedStandin, tmp_path: Path
) -> None:
    async with open_rig(
        "runner_kills", tmp_path, nats.url, site, model, runners=RUNNERS, ack_wait_s=3.0
    ) as rig:
        replays: dict[str, Case] = {}

        async def prepare(name: str) -> None:
            replays[name] = await rig.prepared_replay(f"replay/{name}", f"rk-{name}")

        async with anyio.create_task_group() as tg:
            for name in (*BOUNDARIES, "twice"):
                tg.start_soon(prepare, name)
        async with anyio.create_task_group() as tg:
            for boundary in BOUNDARIES:
                full = await rig.task(f"full/{boundary}", f"fk-{boundary}")
                tg.start_soon(kill_at, rig, full, True, boundary)
                tg.start_soon(kill_at, rig, replays[boundary], False, boundary)
            tg.start_soon(kill_twice, rig, await rig.task("full/twice", "fk-twice"), True)
            tg.start_soon(kill_twice, rig, replays["twice"], False)
        verdicts = await rig.verdicts()
    assert_targets("runner kills", verdicts, rig.faults, PLANNED_FAULTS)
