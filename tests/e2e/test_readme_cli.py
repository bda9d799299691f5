"""The README's NATS CLI walk-through, executed line by line against a running stack:
every `nats req` must be answered without an error, every `nats pub` must be applied,
and the runs must go the way the comments say (full run, replay, full run after the
invalidation, then paused)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import anyio
import pytest

from contracts import subjects as s
from contracts.executors import ExecutorHealth, ExecutorRef
from contracts.runs import RunEvent
from contracts.tasks import TaskRef, TaskView
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, wait_finished

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"
SITE_IN_README = "http://127.0.0.1:8000"


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    section = text[text.index("## The whole loop from the NATS CLI") :]
    section = section[: section.index("\n## ", 5)]
    commands = []
    for line in section.splitlines():
        if line.startswith(("nats req ", "nats pub ")):
            commands.append(shlex.split(line, comments=True))
    return commands


def test_the_readme_has_the_whole_loop() -> None:
    verbs = [c[2] for c in readme_commands()]
    for subject in (
        s.TASKS_CREATE,
        s.TASKS_RUN,
        s.EXECUTORS_GET,
        s.EXECUTORS_INVALIDATE,
        s.RUNS_LIST,
    ):
        assert subject in verbs
    assert "rote.intake.tasks.pause" in verbs


async def _first_run(bus: Bus, task_id: str) -> RunEvent:
    """The run an interval task gets at creation."""
    subject = s.run_events_of(task_id=task_id, event="requested")
    with anyio.fail_after(60):
        while True:
            msgs = await read_all(bus.js, s.STREAM_RUNS, subject)
            if msgs:
                return decode(msgs[0].data, RunEvent)
            await anyio.sleep(0.2)


async def test_readme_nats_cli_loop_works(stack_settings: Settings, rig_parts: Rig) -> None:
    site = rig_parts.site  # the stand-in model is running too (rig_parts)
    names = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        bus = stack.bus
        sources: list[str] = []
        for command in readme_commands():
            _, verb, subject, payload, *rest = command
            payload = payload.replace(SITE_IN_README, site.url)
            if verb == "pub":
                headers = dict(h.split(":", 1) for h in rest[1::2]) if rest else None
                ack = await bus.js.publish(subject, payload.encode(), headers=headers)
                assert not ack.duplicate
                continue
            reply = await bus.nc.request(subject, payload.encode(), timeout=30)
            assert not (reply.headers or {}).get("Nats-Service-Error"), (command, reply.data)
            body = json.loads(reply.data)
            if subject == s.TASKS_CREATE:
                first = await _first_run(bus, body["task_id"])
                done = await wait_finished(bus, first.run_id, timeout=90)
                sources.append(done.source or "")
            elif subject == s.TASKS_RUN:
                done = await wait_finished(bus, body["run_id"], timeout=90)
                assert done.status == "completed", done.error
                sources.append(done.source or "")
                if done.source == "full_llm":  # wait for its trace to compile
                    with anyio.fail_after(30):
                        while (
                            await bus.request(
                                s.EXECUTORS_GET, ExecutorRef(task_id="news"), ExecutorHealth
                            )
                        ).status != "active":
                            await anyio.sleep(0.2)
        # The comments in the README: full run, replay, full run after invalidation.
        assert sources == ["full_llm", "executor", "full_llm"]
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id="news"), ExecutorHealth)
        assert (health.status, health.version) == ("active", 2)
        # The pin the "More:" line shows works where the walk-through leaves off.
        pin = re.search(r"`rote\.api\.executors\.pin '(\{[^']*\})'`", README.read_text())
        assert pin is not None
        reply = await bus.nc.request(s.EXECUTORS_PIN, pin.group(1).encode(), timeout=30)
        assert not (reply.headers or {}).get("Nats-Service-Error"), reply.data
        with anyio.fail_after(20):  # the intake pause is applied
            while (
                await bus.request(s.TASKS_GET, TaskRef(task_id="news"), TaskView)
            ).status != "paused":
                await anyio.sleep(0.2)
        assert await run_events(bus, "nonexistent") == []
