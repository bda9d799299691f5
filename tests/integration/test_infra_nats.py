"""infra/ on real nats-servers: the stream files are valid JetStream API requests that
give exactly the streams rote provisions, and infra/nats/nats-server.conf (and its
accounts example) runs a server rote connects to and provisions.

The helpers here start nats-server processes from infra/ config files with free ports
and temporary store directories; test_infra_cluster.py uses them too.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
import pytest

from contracts import subjects as s
from contracts.base import Empty
from contracts.system import SystemInfo
from services.cli.infra import stream_config_json
from services.kernel.bus import Bus, connect
from services.kernel.embedded_nats import EmbeddedNats, find_server_binary, free_port
from services.kernel.runtime import open_stack
from services.kernel.secrets import MASK, register_secret
from services.kernel.settings import Settings
from services.kernel.streams import BUCKET_STREAMS, STREAMS, ensure_streams

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
SERVER_CONF = INFRA / "nats" / "nats-server.conf"
STORE_DIR_LINE = re.compile(r'^(\s*store_dir:\s*)"/var/lib/nats"\s*$', re.MULTILINE)


# --- running nats-server from infra/ config files ------------------------------------


def with_store_dir(conf: str, store_dir: Path) -> str:
    """The config with its store_dir moved to `store_dir` (nats-server refuses -sd beside
    a store_dir in the file, so tests rewrite the line). Exactly one such line must
    exist: a config that changed shape fails here, not silently elsewhere."""
    new, count = STORE_DIR_LINE.subn(lambda m: f'{m.group(1)}"{store_dir}"', conf)
    assert count == 1, "expected exactly one store_dir line in the example config"
    return new


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server goes when pytest goes, even on a hard crash.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class Node:
    name: str
    port: int
    monitor_port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def monitor(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.monitor_port}{path}"
        with urllib.request.urlopen(url, timeout=2) as reply:
            return json.loads(reply.read())

    def healthy(self) -> bool:
        try:
            return self.monitor("/healthz").get("status") == "ok"  # type: ignore[no-any-return]
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


class Servers:
    """nats-server processes started from config files, every one of them killed at the
    end (and checked gone), whatever happened in between."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.nodes: list[Node] = []

    def start(
        self,
        name: str,
        conf: str,
        *,
        args: list[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Node:
        home = self.workdir / name
        home.mkdir(parents=True, exist_ok=True)
        conf_file = home / "nats.conf"
        conf_file.write_text(with_store_dir(conf, home / "store"))
        port, monitor_port, log = free_port(), free_port(), home / "nats-server.log"
        command = [
            find_server_binary(),
            "-c",
            str(conf_file),
            # Flags override the file: loopback only, free ports.
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-m",
            str(monitor_port),
            "--log",
            str(log),
            *(args or []),
        ]
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        node = Node(name, port, monitor_port, process, log)
        self.nodes.append(node)
        return node

    def wait_healthy(self, nodes: list[Node], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in nodes:
                if node.process.poll() is not None:
                    err = node.process.stderr.read().decode() if node.process.stderr else ""
                    log = node.log.read_text()[-2000:] if node.log.exists() else ""
                    raise AssertionError(f"{node.name} exited: {err} {log}")
            if all(node.healthy() for node in nodes):
                return
            time.sleep(0.1)
        raise AssertionError(f"servers not healthy within {timeout}s")

    def stop_all(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.kill()
        leftover = leftover_servers(self.workdir)
        assert not leftover, f"nats-server processes left behind: {leftover}"


def leftover_servers(workdir: Path) -> list[int]:
    """Live processes whose command line mentions `workdir` (our configs live there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if str(workdir) in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path / "servers")
    try:
        yield started
    finally:
        started.stop_all()


async def raw_request(bus: Bus, subject: str, body: bytes = b"") -> dict[str, Any]:
    reply = await bus.nc.request(subject, body, timeout=10)
    return json.loads(reply.data)  # type: ignore[no-any-return]


def stream_files(directory: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


async def create_from_files(bus: Bus, directory: Path) -> dict[str, dict[str, Any]]:
    """Create every stream from its JSON file through the JetStream API, as `nats stream
    add --config FILE` does; returns the server's replies."""
    replies = {}
    for name, config in stream_files(directory).items():
        reply = await raw_request(bus, f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode())
        assert "error" not in reply, f"{name}: {reply.get('error')}"
        replies[name] = reply
    return replies


async def server_configs(bus: Bus) -> dict[str, dict[str, Any]]:
    """Every rote stream's configuration as the server holds it."""
    configs = {}
    for spec in STREAMS:
        reply = await raw_request(bus, f"$JS.API.STREAM.INFO.{spec.name}")
        assert "error" not in reply, reply
        configs[spec.name] = reply["config"]
    return configs


# --- the stream files --------------------------------------------------------------


async def test_stream_files_create_the_streams_rote_provisions(bus: Bus, tmp_path: Path) -> None:
    replies = await create_from_files(bus, INFRA / "streams")
    assert set(replies) == {spec.name for spec in STREAMS}
    for spec in STREAMS:
        config = replies[spec.name]["config"]
        assert config["subjects"] == spec.subjects
        assert config["num_replicas"] == 1
        assert config["max_age"] == round(spec.max_age_s * 1e9)

    # rote finds nothing to change in streams made from the files...
    outcome = await ensure_streams(bus.js)
    streams = {name: outcome[name] for name in outcome if name not in BUCKET_STREAMS}
    assert streams == {spec.name: "unchanged" for spec in STREAMS}

    # ...and the server holds the same configuration as when rote makes them itself.
    from_files = await server_configs(bus)
    with EmbeddedNats(tmp_path / "other", port=free_port()) as other:
        other_bus = await connect(other.url, name="rote-test-other")
        try:
            await ensure_streams(other_bus.js)
            from_code = await server_configs(other_bus)
        finally:
            await other_bus.close()
    assert from_files == from_code


async def test_a_stream_file_with_a_bad_value_is_refused(bus: Bus) -> None:
    # The counterpart of the test above: the server does check what the files say.
    config = stream_config_json(STREAMS[0])
    config["retention"] = "forever"
    reply = await raw_request(
        bus, f"$JS.API.STREAM.CREATE.{config['name']}", json.dumps(config).encode()
    )
    assert "error" in reply


# --- infra/nats/nats-server.conf ---------------------------------------------------


async def test_server_config_runs_a_server_rote_provisions(
    servers: Servers, tmp_path: Path
) -> None:
    node = servers.start("single", SERVER_CONF.read_text())
    servers.wait_healthy([node])

    varz = node.monitor("/varz")
    assert varz["server_name"] == "rote-nats-1"
    assert varz["max_payload"] == 1024 * 1024
    assert varz["jetstream"]["config"]["max_storage"] == 50 * 1024**3
    assert varz["jetstream"]["config"]["store_dir"].startswith(str(tmp_path))

    settings = Settings(
        nats_url=node.url, data_dir=tmp_path / "data", event_store="memory", log_format="json"
    )
    async with open_stack(settings, ["system"]) as stack:
        assert stack.embedded is None
        info = await stack.bus.request(s.SYSTEM_INFO, Empty(), SystemInfo)
        assert info.nats_url == node.url
        assert not info.embedded_nats
        for spec in STREAMS:
            stream = await stack.bus.js.stream_info(spec.name)
            assert stream.config.subjects == spec.subjects
            assert stream.config.num_replicas == 1
        # The server's max_payload is what the client is told, and what it enforces.
        assert stack.bus.nc.max_payload == 1024 * 1024


def accounts_example(conf: str) -> str:
    """The commented accounts example of nats-server.conf, uncommented."""
    block = re.search(r"^# begin accounts example\n(.*?)^# end accounts example", conf, re.S | re.M)
    assert block, "the accounts example markers are missing"
    lines = [re.sub(r"^# ?", "", line) for line in block.group(1).splitlines()]
    return conf + "\n" + "\n".join(lines) + "\n"


async def test_accounts_example_with_credentials_in_rote_nats_url(
    servers: Servers, tmp_path: Path
) -> None:
    passwords = {
        "ROTE_NATS_PASSWORD": "rote-" + os.urandom(8).hex(),
        "ROTE_NATS_OPS_PASSWORD": "ops-" + os.urandom(8).hex(),
        "NATS_SYS_PASSWORD": "sys-" + os.urandom(8).hex(),
    }
    node = servers.start("accounts", accounts_example(SERVER_CONF.read_text()), env=passwords)
    servers.wait_healthy([node])

    # Without credentials the server turns a client away.
    with pytest.raises((nats.errors.Error, OSError)):
        await nats.connect(
            node.url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0
        )

    password = passwords["ROTE_NATS_PASSWORD"]
    register_secret(password)  # as `rote` does for secret-looking variables
    url = f"nats://rote:{password}@127.0.0.1:{node.port}"
    settings = Settings(
        nats_url=url, data_dir=tmp_path / "data", event_store="memory", log_format="json"
    )
    async with open_stack(settings, ["system"]) as stack:
        info = await stack.bus.request(s.SYSTEM_INFO, Empty(), SystemInfo)
        assert password not in info.nats_url
        assert MASK in info.nats_url

        # The operators' user shares the account, so it sees rote's streams.
        ops = await connect(
            f"nats://ops:{passwords['ROTE_NATS_OPS_PASSWORD']}@127.0.0.1:{node.port}",
            name="ops",
        )
        try:
            names = {spec.name for spec in STREAMS}
            seen = {name async for name in _stream_names(ops)}
            assert names <= seen
        finally:
            await ops.close()


async def _stream_names(bus: Bus) -> Any:
    reply = await raw_request(bus, "$JS.API.STREAM.NAMES")
    for name in reply.get("streams") or []:
        yield name


async def test_embedded_server_keeps_one_replica_whatever_is_configured(tmp_path: Path) -> None:
    # ROTE_STREAM_REPLICAS=3 set for the cluster must not break a local `rote up`.
    settings = Settings(
        nats_url=None,
        data_dir=tmp_path / "data",
        event_store="memory",
        log_format="json",
        stream_replicas=3,
    )
    async with open_stack(
        settings, ["system"], join_running=False, embedded_port=free_port()
    ) as stack:
        assert stack.embedded is not None
        for spec in STREAMS:
            assert (await stack.bus.js.stream_info(spec.name)).config.num_replicas == 1


# --- rote infra provision ------------------------------------------------------------


async def rote(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "ROTE_LOG_LEVEL": "error", "ROTE_NATS_URL": ""}
    done = await anyio.run_process(
        [sys.executable, "-m", "services.cli", *args], cwd=ROOT, env=env, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_provision_command_creates_then_changes_nothing(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    code, out, err = await rote("infra", "provision", "--nats-url", nats_server.url)
    assert code == 0, err
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert {lines[spec.name] for spec in STREAMS} == {"created (R1)"}
    for spec in STREAMS:
        assert (await bus.js.stream_info(spec.name)).config.subjects == spec.subjects

    code, out, err = await rote("infra", "provision", "--nats-url", nats_server.url)
    assert code == 0, err
    assert {line.split(": ", 1)[1] for line in out.splitlines()} == {"unchanged (R1)"}


async def test_provision_command_says_when_nats_is_not_there() -> None:
    url = f"nats://rote:hunter2-secret@127.0.0.1:{free_port()}"
    code, out, err = await rote("infra", "provision", "--nats-url", url, "--connect-timeout", "1")
    assert code == 1
    assert "no NATS answered at nats://rote:[redacted]@127.0.0.1" in err
    assert err.count("\n") == 1 and "(last error: " in err and "Connect call failed" in err
    assert "hunter2-secret" not in err + out


async def test_provision_command_refuses_r3_on_a_single_server(nats_server: EmbeddedNats) -> None:
    code, out, err = await rote(
        "infra", "provision", "--nats-url", nats_server.url, "--replicas", "3"
    )
    assert code == 1
    assert out == ""
    # Not the server's "replicas > 1 not supported in non-clustered mode": what to do.
    assert err == (
        f"rote: provisioning {nats_server.url} failed: streams with 3 replicas need a"
        " JetStream cluster of at least 3 servers, and this NATS is a single server that is"
        " not clustered: run a cluster (infra/nats/cluster/, see infra/README.md) or use"
        " --replicas 1 on a single server\n"
    )


async def test_provision_command_prints_its_summary_without_log_lines(
    nats_server: EmbeddedNats,
) -> None:
    # The default log level: the first provision creates everything, and nothing but
    # the summary is printed (no stream_created log lines beside it).
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    done = await anyio.run_process(
        [sys.executable, "-m", "services.cli", "infra", "provision", "--nats-url", nats_server.url],
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode() == ""
    names = [spec.name for spec in STREAMS] + list(BUCKET_STREAMS)
    assert sorted(done.stdout.decode().splitlines()) == sorted(f"{n}: created (R1)" for n in names)


@pytest.mark.parametrize(
    "conf",
    [
        SERVER_CONF,
        *sorted((INFRA / "nats" / "cluster").glob("*.conf")),
    ],
    ids=lambda p: p.name,
)
async def test_config_files_pass_the_servers_own_check(conf: Path) -> None:
    done = await anyio.run_process([find_server_binary(), "-t", "-c", str(conf)], check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert b"is valid" in done.stdout + done.stderr
