"""rote's services as an operator runs them: each one its own `rote serve NAME` process
(this worktree's code), which the suite can kill -9 like a crash would."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from nats.js.errors import KeyNotFoundError

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.lease import run_key

ROOT = Path(__file__).resolve().parents[2]
# Every service but the runner: the runners come and go in the tests.
STEADY = ("system", "llm", "tools", "compiler", "tracer", "scheduler")
READY_LINE = "rote serve: NATS"
# What the supervisor waits before it starts a service that exited on its own again
# (infra/systemd/rote@.service: Restart=always, RestartSec=2).
RESTART_S = 2.0


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: a service goes when the test process goes, even on a hard crash.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class ServiceProcess:
    name: str
    number: int
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path
    # Stopped by the test (a fault, the end): not for the supervisor to restart.
    stopped: bool = False
    restarted: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def ready(self) -> bool:
        try:
            return READY_LINE in self.out.read_text()
        except OSError:
            return False

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.err.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Services:
    """Spawns `rote serve NAME` processes with one environment (NATS URL, data dir,
    short ack wait...), and stops whatever is left of them at the end."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.procs: list[ServiceProcess] = []
        self._numbers = itertools.count(1)
        # Services that exited without the test stopping them, as the report says it.
        self.exits: list[str] = []

    def spawn(self, name: str, **extra_env: str) -> ServiceProcess:
        """Start one service process (not waiting for it). Call it on the event-loop
        thread: a process asked to die with its parent dies with the spawning thread."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
        env = {**inherited, **self.env, **extra_env, "PYTHONPATH": str(ROOT)}
        number = next(self._numbers)
        out = self.logs / f"{name}-{number}.out"
        err = self.logs / f"{name}-{number}.log"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "serve", name],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        proc = ServiceProcess(name, number, popen, out, err)
        self.procs.append(proc)
        return proc

    async def wait_ready(self, procs: list[ServiceProcess], timeout: float = 90.0) -> None:
        with anyio.fail_after(timeout):
            while not all(p.ready() for p in procs):
                for p in procs:
                    if not p.alive():
                        raise AssertionError(
                            f"{p.name} #{p.number} exited with {p.popen.returncode}:\n{p.tail()}"
                        )
                await anyio.sleep(0.1)

    async def start(self, *names: str, **extra_env: str) -> list[ServiceProcess]:
        procs = [self.spawn(name, **extra_env) for name in names]
        await self.wait_ready(procs)
        return procs

    def live(self, name: str) -> list[ServiceProcess]:
        return [p for p in self.procs if p.name == name and p.alive()]

    async def supervise(self) -> None:
        """Start again, as systemd would, every service that exits on its own (a
        crash, or giving up on NATS), and say so in the report."""
        while True:
            for proc in list(self.procs):
                if proc.alive() or proc.stopped or proc.restarted:
                    continue
                proc.restarted = True
                last = proc.tail(1).strip()[-200:]
                self.exits.append(
                    f"{proc.name} #{proc.number} exited with {proc.popen.returncode}"
                    f" ({last}); started again"
                )
                await anyio.sleep(RESTART_S)
                self.spawn(proc.name)
            await anyio.sleep(0.5)

    def kill(self, proc: ServiceProcess, sig: signal.Signals = signal.SIGKILL) -> None:
        proc.stopped = True
        if proc.alive():
            proc.popen.send_signal(sig)
        proc.popen.wait(30)

    async def stop_all(self) -> None:
        """SIGTERM every live process, then SIGKILL what is left after a grace period."""
        for p in self.procs:
            p.stopped = True
        live = [p for p in self.procs if p.alive()]
        for p in live:
            p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while any(p.alive() for p in live) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        for p in live:
            if p.alive():
                p.popen.kill()
            p.popen.wait(10)


async def claim_holder_pid(bus: Bus, run_id: str) -> int | None:
    """The pid of the runner holding the run's claim (rote_leases, key run.<run_id>,
    value host:pid:nonce), or None while no runner holds it."""
    kv = await bus.js.key_value(s.BUCKET_LEASES)
    try:
        entry = await kv.get(run_key(run_id))
    except KeyNotFoundError:
        return None
    if not entry.value:
        return None
    parts = entry.value.decode().split(":")
    return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None


async def runner_of(services: Services, bus: Bus, run_id: str) -> ServiceProcess:
    """The live runner process holding the run's claim (waiting until one does)."""
    while True:
        with contextlib.suppress(Exception):  # NATS away for a moment
            pid = await claim_holder_pid(bus, run_id)
            runner = next((p for p in services.live("runner") if p.pid == pid), None)
            if runner is not None:
                return runner
        await anyio.sleep(0.02)
