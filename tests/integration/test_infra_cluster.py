"""The 3-node cluster of infra/nats/cluster/ on three real nats-server processes: rote
provisions its streams at R3, and a stream keeps taking and serving events after the
node that led it is killed."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import nats.errors
import pytest
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError

from contracts import subjects as s
from contracts.base import Empty
from contracts.system import SystemInfo
from services.cli.infra import provision
from services.kernel.bus import Bus, connect
from services.kernel.consumers import durable_config, ensure_consumer
from services.kernel.embedded_nats import free_port
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.kernel.streams import BUCKET_STREAMS, STREAMS, ensure_streams
from tests.integration.test_infra_nats import (
    INFRA,
    Node,
    Servers,
    create_from_files,
    server_configs,
    servers,
    stream_files,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

__all__ = ["servers"]  # the fixture: every nats-server started here is killed at the end

CLUSTER = INFRA / "nats" / "cluster"
T = TypeVar("T")


def start_cluster(servers: Servers) -> list[Node]:
    """The three example configs as they are, with loopback addresses and free ports
    given on the command line (flags override the file: listen, monitoring, cluster
    listen and routes); store_dir is rewritten into the test's directory."""
    route_ports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{port}" for port in route_ports)
    nodes = [
        servers.start(
            f"nats-{i}",
            (CLUSTER / f"nats-{i}.conf").read_text(),
            args=["--cluster", f"nats://127.0.0.1:{route_ports[i - 1]}", "--routes", routes],
        )
        for i in (1, 2, 3)
    ]
    # Healthy means JetStream is up and the meta group has a leader.
    servers.wait_healthy(nodes, timeout=60)
    for node in nodes:
        varz = node.monitor("/varz")
        assert varz["cluster"]["name"] == "rote"
        assert varz["server_name"] == node.name.replace("nats-", "rote-nats-")
    return nodes


async def retrying(action: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """What a client sees while a stream elects a new leader: no responders or timeouts
    for a few seconds. Keep trying until it answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await action()
        except (nats.errors.Error, NoStreamResponseError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer within {timeout}s: {exc!r}") from exc
            await anyio.sleep(0.25)


async def test_stream_files_for_the_cluster_create_r3_streams(servers: Servers) -> None:
    nodes = start_cluster(servers)
    bus = await connect(nodes[0].url, name="rote-test")
    try:
        replies = await retrying(lambda: create_from_files(bus, CLUSTER / "streams"))
        assert set(replies) == {spec.name for spec in STREAMS}
        for name, reply in replies.items():
            assert reply["config"]["num_replicas"] == 3, name
        outcome = await ensure_streams(bus.js, 3)
        # The files hold the streams; the buckets are rote's own and appear on first use.
        assert {n: outcome[n] for n in outcome if n not in BUCKET_STREAMS} == {
            spec.name: "unchanged" for spec in STREAMS
        }
        configs = await server_configs(bus)
        assert {name: c["num_replicas"] for name, c in configs.items()} == {
            name: f["num_replicas"] for name, f in stream_files(CLUSTER / "streams").items()
        }
    finally:
        await bus.close()


async def test_rote_provisions_r3_and_survives_losing_the_leader(
    servers: Servers, tmp_path: Path
) -> None:
    nodes = start_cluster(servers)

    # `rote serve` with ROTE_STREAM_REPLICAS=3, pointed at one node of the cluster.
    settings = Settings(
        nats_url=nodes[0].url,
        data_dir=tmp_path / "data",
        event_store="memory",
        log_format="json",
        stream_replicas=3,
    )
    async with open_stack(settings, ["system"]) as stack:
        info = await stack.bus.request(s.SYSTEM_INFO, Empty(), SystemInfo)
        assert info.services_running == ["system"]
        for spec in STREAMS:
            stream = await stack.bus.js.stream_info(spec.name)
            assert stream.config.num_replicas == 3
            assert stream.cluster is not None and stream.cluster.name == "rote"
            assert stream.cluster.leader
            assert len(stream.cluster.replicas or []) == 2
        # The buckets' streams are replicated as well; provisioning again changes nothing.
        for name in BUCKET_STREAMS:
            assert (await stack.bus.js.stream_info(name)).config.num_replicas == 3
        again = await provision(stack.bus.js, 3)
        assert set(again.values()) == {"unchanged"}

    probe = await connect(nodes[0].url, name="rote-test-probe")
    try:
        leader_name = (await probe.js.stream_info(s.STREAM_RUNS)).cluster.leader  # type: ignore[union-attr]
    finally:
        await probe.close()
    leader = next(node for node in nodes if node.name.replace("nats-", "rote-nats-") == leader_name)
    survivors = [node for node in nodes if node is not leader]

    # A client connected to the very node that is about to die: it must carry on through
    # the others it learnt from the cluster.
    bus = await connect(leader.url, name="rote-test")
    try:
        kv = await bus.js.key_value(s.BUCKET_RELAY)
        await kv.put("infra-test", b"before")
        consumer = "infra-test"
        await ensure_consumer(
            bus.js, s.STREAM_RUNS, durable_config(consumer, filter_subjects=[s.RUN_EVENTS_ALL])
        )
        first = await _publish(bus, "before")
        assert first.stream == s.STREAM_RUNS
        assert await _consume_one(bus, consumer) == b'{"n":"before"}'

        leader.kill()  # SIGKILL: a crash, not a clean shutdown

        second = await retrying(lambda: _publish(bus, "after"))
        assert second.seq == first.seq + 1
        # Both events are stored and readable from the two nodes left...
        stream = await retrying(lambda: bus.js.stream_info(s.STREAM_RUNS))
        assert stream.state.messages == 2
        assert stream.cluster is not None and stream.cluster.leader != leader_name
        for ack, n in ((first, b"before"), (second, b"after")):
            stored = await retrying(lambda ack=ack: bus.js.get_msg(s.STREAM_RUNS, ack.seq))
            assert stored.data == b'{"n":"%s"}' % n
        # ...and the durable consumer (replicated with its stream) delivers the new one.
        assert await retrying(lambda: _consume_one(bus, consumer)) == b'{"n":"after"}'
        # ...and so is the relay's key-value bucket, raised to R3 by provision.
        entry = await retrying(lambda: kv.get("infra-test"))
        assert entry.value == b"before"
        assert bus.nc.connected_url is not None
        assert bus.nc.connected_url.port in {node.port for node in survivors}
    finally:
        await bus.close()


async def _publish(bus: Bus, n: str) -> PubAck:
    return await bus.js.publish(
        s.run_event("task-infra", f"run-{n}", "completed"),
        b'{"n":"%s"}' % n.encode(),
        headers={s.HEADER_MSG_ID: f"infra-{n}"},
        timeout=2,
    )


async def _consume_one(bus: Bus, consumer: str) -> bytes:
    sub = await bus.js.pull_subscribe_bind(durable=consumer, stream=s.STREAM_RUNS)
    try:
        [msg] = await sub.fetch(1, timeout=2)
        await msg.ack()
        return msg.data
    finally:
        await sub.unsubscribe()
