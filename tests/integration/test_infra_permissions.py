"""infra/nats/permissions.conf on a real nats-server: it loads, an operator may send task
commands but not publish a trace (a trace becomes an executor runners replay), and the
tracer may. The whole life of a task with every service under its own user is in
tests/e2e/test_permissions.py.

The helpers here start a server with the example and give each user's URL."""

from __future__ import annotations

import json
import os
import re
import shutil

import anyio
import pytest

from contracts import subjects as s
from services.kernel.bus import connect
from services.kernel.streams import ensure_streams
from tests.integration.test_infra_nats import INFRA, SERVER_CONF, Node, Servers, servers

pytestmark = pytest.mark.anyio

__all__ = ["servers"]  # the fixture: every nats-server started here is killed at the end

PERMISSIONS_CONF = INFRA / "nats" / "permissions.conf"
SERVICE_USERS = ("scheduler", "runner", "tools", "llm", "tracer", "compiler", "system")
USERS = (*SERVICE_USERS, "operator")
_INCLUDE = re.compile(r"^# (include permissions\.conf)$", re.MULTILINE)


class Permissioned:
    """A server running nats-server.conf with its `include permissions.conf` line
    uncommented, and a password per user in the server's environment."""

    def __init__(self, servers: Servers, name: str = "permissions") -> None:
        self.passwords = {user: f"{user}-{os.urandom(8).hex()}" for user in USERS}
        env = {f"ROTE_NATS_{u.upper()}_PASSWORD": pw for u, pw in self.passwords.items()}
        env["NATS_SYS_PASSWORD"] = "sys-" + os.urandom(8).hex()
        conf, count = _INCLUDE.subn(r"\1", SERVER_CONF.read_text())
        assert count == 1, "expected one commented `include permissions.conf` line"
        home = servers.workdir / name
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(PERMISSIONS_CONF, home / "permissions.conf")  # included from beside it
        self.node: Node = servers.start(name, conf, env=env)
        servers.wait_healthy([self.node])

    def url(self, user: str) -> str:
        return f"nats://{user}:{self.passwords[user]}@127.0.0.1:{self.node.port}"

    def violations(self) -> list[str]:
        """The server's log lines about a refused publish or subscribe."""
        return [line for line in self.node.log.read_text().splitlines() if "Violation" in line]


async def until_said(errors: list[str], text: str) -> str:
    with anyio.fail_after(5):
        while not (said := [e for e in errors if text in e]):
            await anyio.sleep(0.05)
    return said[0]


async def test_operators_send_commands_and_only_the_tracer_publishes_traces(
    servers: Servers,
) -> None:
    server = Permissioned(servers)
    scheduler = await connect(server.url("scheduler"), name="scheduler")
    said: list[str] = []
    operator = await connect(server.url("operator"), name="operator", on_attempt_failed=said.append)
    tracer = await connect(server.url("tracer"), name="tracer")
    try:
        await ensure_streams(scheduler.js)  # as every rote process does at start

        # A task command reaches the intake stream.
        create = json.dumps({"name": "news", "prompt": "p"}).encode()
        ack = await operator.js.publish(s.intake_task("create"), create)
        assert ack.stream == s.STREAM_INTAKE

        # A trace is refused: the server says so, and the stream stores nothing.
        forged = "rote.evt.trace.x.captured"
        await operator.nc.publish(forged, b'{"trace": {}}')
        error = await until_said(said, "ermissions violation")
        assert forged in error and "publish" in error.lower()
        # So is what a service alone may publish: a run request, a tool call.
        await operator.nc.publish(s.WORK_RUNS, b"{}")
        await until_said(said, s.WORK_RUNS)
        await operator.nc.publish(s.TOOLS_EXEC, b"{}")
        await until_said(said, s.TOOLS_EXEC)
        assert (await tracer.js.stream_info(s.STREAM_TRACES)).state.messages == 0
        assert (await tracer.js.stream_info(s.STREAM_WORK)).state.messages == 0

        # The tracer may publish there.
        stored = await tracer.js.publish(forged, b'{"trace": {}}')
        assert stored.stream == s.STREAM_TRACES
        assert (await tracer.js.stream_info(s.STREAM_TRACES)).state.messages == 1
    finally:
        for bus in (operator, tracer, scheduler):
            await bus.close()
    # The server logged the three refusals, all of them the operator's.
    refused = server.violations()
    assert len(refused) == 3 and all('"ROTE/user:operator"' in line for line in refused)
