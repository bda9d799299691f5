"""`rote demo` as a newcomer runs it: the scenario's sources and versions per run, a
summary whose numbers add up, exit 0, and nothing left running."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts import subjects as s
from contracts.executors import ExecutorEvent
from services.dev.demo import scenario
from services.dev.demo.scenario import TASK_ID
from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus
from services.kernel.streams import ensure_streams
from tests.e2e.helpers import DEMO_SOURCES, DEMO_VERSIONS
from tests.leftovers import MARK_VARIABLE, wait_gone

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# A run's row: number, source, version, large/small tokens, cost, saved, duration, note.
ROW = re.compile(
    r"^\s*(\d+)\s+(full_llm|executor)\s+(v\d+|-)\s+(\d+)\s+(\d+)\s+"
    r"(-?[\d.]+)\s+(-?[\d.]+)\s+([\d.]+)s(.*)$"
)


def demo_command() -> list[str]:
    """The README's first command (`infra/dev demo`) where the tests run in the project's
    own .venv, as `infra/dev test` and so CI runs them; elsewhere the same demo through
    this interpreter, since infra/dev would build a .venv of its own first."""
    if Path(sys.prefix).resolve() == (REPO / ".venv").resolve():
        return [str(REPO / "infra" / "dev"), "demo", "--json"]
    return [sys.executable, "-m", "services.cli", "demo", "--json"]


def test_demo_walks_the_whole_life_of_a_task() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
    marker = uuid.uuid4().hex
    env[MARK_VARIABLE] = marker
    done = subprocess.run(
        demo_command(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    summary = json.loads(out[out.index("\n{") + 1 :])
    runs = summary["runs"]

    # The first change heals in place (run 4 makes v2); the second falls back (run 6).
    assert [r["source"] for r in runs] == DEMO_SOURCES
    assert [r["executor_version"] for r in runs] == DEMO_VERSIONS
    assert [r["fell_back"] for r in runs] == [False] * 5 + [True, False]
    assert [r["healed"] for r in runs] == [0, 0, 0, 1, 0, 0, 0]
    assert summary["versions"] == [1, 2, 3]
    assert summary["full_runs_caused_by_site_change"] == 1
    for r in runs:
        assert r["status"] == "completed"
        assert r["result"].startswith("Top 3 headlines:\n1. ")
        if r["source"] == "executor":
            # No large model; the small model only checks the answer of a version's
            # first replays (all three replays here are of a new version).
            assert r["large_tokens"] == 0 and r["checked"] == "verified"
            assert r["small_tokens"] > 0 and r["cost_usd"] > 0
            assert r["saved_usd"] > 0
        else:
            assert r["large_tokens"] > 0 and r["cost_usd"] > 0

    # The table a newcomer reads says what the JSON says, a row per run, in order, with
    # each compilation under the run it came from and the site change before run 4.
    table = [
        line
        for line in out[: out.index("\n{")].splitlines()
        if ROW.match(line) or "compiled v" in line or "-- the site changes" in line
    ]
    table += [line for line in out.splitlines() if line.strip().startswith("healed v")]
    table.sort(key=out.index)
    assert [line.split()[0] for line in table] == [
        "1", "compiled", "2", "3", "--", "4", "healed", "5", "--", "6", "compiled", "7",
    ]  # fmt: skip
    printed = [shown for line in table if (shown := ROW.match(line))]
    for shown, r in zip(printed, runs, strict=True):
        number, source, version, large, small, cost, saved, secs, note = shown.groups()
        assert (int(number), source) == (r["number"], r["source"])
        assert version == (f"v{r['executor_version']}" if r["executor_version"] else "-")
        assert (int(large), int(small)) == (r["large_tokens"], r["small_tokens"])
        assert float(cost) == pytest.approx(r["cost_usd"], abs=1e-6)
        assert float(saved) == pytest.approx(r["saved_usd"], abs=1e-6)
        assert float(secs) == pytest.approx(r["duration_ms"] / 1000, abs=0.01)
        assert ("fell back" in note) == r["fell_back"]
        assert ("answer checked: verified" in note) == (r["checked"] == "verified")
        assert ("healed in place" in note) == (r["healed"] > 0)

    total = sum(r["cost_usd"] for r in runs)
    assert summary["total_cost_usd"] == pytest.approx(total)
    # "All as full LLM runs" costs each run at the full run of the layout it saw: the
    # redesigned page makes a different conversation (and cost) from the first one.
    assert [r["layout"] for r in runs] == ["v1", "v1", "v1", "v2", "v2", "v3", "v3"]
    for r in runs:
        if r["source"] == "full_llm":
            # A fallback's cost holds the replay that broke first; its full run does not.
            assert r["full_run_cost_usd"] == pytest.approx(
                r["cost_usd"] - r["failed_replay_cost_usd"]
            )
        else:
            assert r["full_run_cost_usd"] is None
    by_layout = {"v1": runs[0]["full_run_cost_usd"], "v3": runs[5]["full_run_cost_usd"]}
    assert summary["full_run_cost_usd_by_layout"] == pytest.approx(by_layout)
    # No full run saw v2 (healed): its runs are costed at the mean measured full run.
    costed = {**by_layout, "v2": (by_layout["v1"] + by_layout["v3"]) / 2}
    all_full = sum(costed[r["layout"]] for r in runs)
    assert summary["all_full_cost_usd"] == pytest.approx(all_full)
    share = (all_full - total) / all_full * 100
    assert (
        f"total cost ${total:.6f} vs ${all_full:.6f} for the same 7 runs all as full LLM runs "
        f"(each at its layout's full run: v1 ${by_layout['v1']:.6f}, "
        f"v3 ${by_layout['v3']:.6f}): {share:.1f}% saved"
    ) in out
    assert "the site changes cost 1 full run(s)" in out
    # The executor ledger's savings are the replays' savings as their run events said.
    saved = sum(r["saved_usd"] for r in runs)
    assert "executor now v3 (active, replayed 1 time(s))" in out
    assert f"replays of every version saved ${saved:.6f}" in out
    assert "not Claude" in out  # the stand-in says what it is

    # Nothing left behind: no nats-server, Playwright driver or Chromium of the demo's.
    assert wait_gone(marker) == []


@pytest.mark.anyio
async def test_an_earlier_runs_skipped_trace_does_not_stand_for_a_later_compilation(
    bus: Bus,
) -> None:
    """With --live, run 1's trace may be skipped and run 2's compile v1: the demo must
    report v1 for run 2, not the skip it finds first in the stream."""
    await ensure_streams(bus.js)
    at = datetime.now(UTC)
    for event in (
        ExecutorEvent(task_id=TASK_ID, event="skipped", at=at, run_id="run-1", reason="no steps"),
        ExecutorEvent(task_id=TASK_ID, event="compiled", at=at, run_id="run-2", version=1),
    ):
        subject = s.executor_event(TASK_ID, event.event)
        await bus.publish_event(subject, event, msg_id=f"{event.run_id}:{event.event}")
    compiled = await scenario._compiled(bus, "run-2", 5)
    assert compiled is not None and compiled.version == 1
    assert await scenario._compiled(bus, "run-1", 5) is None


def test_live_demo_talks_to_the_server_the_environment_names_with_its_key() -> None:
    """--live uses ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY as they are (Claude's API,
    or any Anthropic-compatible server): here a stand-in that demands that key. The key
    is never printed."""
    key = f"sk-live-check-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
    marker = uuid.uuid4().hex
    env[MARK_VARIABLE] = marker
    command = [sys.executable, "-m", "services.cli", "demo", "--live", "--json"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "rote: --live needs ANTHROPIC_API_KEY" in refused.stderr

    with StandinServer(api_key=key) as server:
        env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY=key)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        answered = server.stats()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model: Claude (live)" in done.stdout and "not Claude" not in done.stdout
    summary = json.loads(done.stdout[done.stdout.index("\n{") + 1 :])
    assert [r["source"] for r in summary["runs"]] == DEMO_SOURCES
    # Every model call reached that server and passed its key check.
    assert answered["messages"] > 0 and answered["messages"] == answered.get("messages:200")
    assert key not in done.stdout + done.stderr

    # A key the server refuses: run 1 says why, and the demo stops there (every later
    # run would be a full run refused the same way), the key still unprinted.
    with StandinServer(api_key=key) as server:
        wrong = f"sk-wrong-{uuid.uuid4().hex}"
        env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY=wrong)
        failed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1
    assert "run 1 failed (llm_error): auth: model API answered 401" in failed.stdout
    assert "\n  2  " not in failed.stdout
    assert (
        failed.stderr.strip()
        .splitlines()[-1]
        .startswith("rote: demo failed: run 1 failed (llm_error): auth:")
    )
    assert "Traceback" not in failed.stderr
    assert key not in failed.stdout + failed.stderr and wrong not in failed.stdout + failed.stderr
    assert wait_gone(marker) == []


def test_demo_refuses_a_data_dir_that_holds_an_earlier_story(tmp_path: Path) -> None:
    (tmp_path / "events.sqlite").write_bytes(b"an earlier demo's store")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"--data-dir {tmp_path} is not empty" in done.stderr
    assert "Traceback" not in done.stderr


class _Demo:
    """`rote demo` in a process group of its own, as a terminal's job is, its output
    read as it comes."""

    def __init__(self, marker: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ROTE_", "ANTHROPIC_"))}
        env[MARK_VARIABLE] = marker
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "demo"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        stdout, stderr = self.proc.stdout, self.proc.stderr
        threading.Thread(target=lambda: [self.lines.put(x) for x in stdout], daemon=True).start()
        self.err_reader = threading.Thread(target=lambda: self.err.extend(stderr), daemon=True)
        self.err_reader.start()


def _wait_for_runs(demo: _Demo) -> tuple[int, Path]:
    """Once the first run is under way: the demo's nats-server pid and its temp dir."""
    deadline = time.monotonic() + 120
    while True:
        try:
            line = demo.lines.get(timeout=0.1)
        except queue.Empty:
            ended = demo.proc.poll()
            assert ended is None, f"demo ended ({ended}) early: {''.join(demo.err)[-3000:]}"
            assert time.monotonic() < deadline, "the demo started no run within 120 s"
            continue
        if line.startswith("run  source"):  # the table's header: run 1 starts now
            break
    time.sleep(1.0)
    children = subprocess.run(
        ["pgrep", "-a", "-P", str(demo.proc.pid), "nats-server"], capture_output=True, text=True
    ).stdout.split("\n")[0]
    store = re.search(r" -sd (\S+)", children)
    assert store, f"no nats-server child of the demo: {children!r}"
    return int(children.split()[0]), Path(store.group(1)).parent


def _assert_interrupted(demo: _Demo) -> str:
    # A bound on the wait alone (a demo that ignored the signal would run on for
    # minutes): how it stopped is what the asserts below hold.
    try:
        code = demo.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        # What it was doing when it did not stop: its last log lines.
        demo.proc.kill()
        demo.err_reader.join(timeout=5)
        raise AssertionError(
            f"still running 30 s after the signal: {''.join(demo.err)[-3000:]}"
        ) from None
    demo.err_reader.join(timeout=10)  # EOF: nothing rote started still holds its stderr
    assert not demo.err_reader.is_alive()
    err = "".join(demo.err)
    assert code == 130, err[-3000:]
    assert "rote: demo interrupted" in err
    assert "Traceback" not in _without_standin_request_errors(err)
    return err


def _without_standin_request_errors(err: str) -> str:
    # The stand-in model's HTTP server prints a traceback when a request's client went
    # away mid-answer (the llm service's call cancelled by the stop): the stand-in's own
    # known fault, not rote's shutdown; rare, and left to services/dev/standin.
    return re.sub(
        r"-{40}\nException occurred during processing of request from .*?\n-{40}\n",
        "",
        err,
        flags=re.DOTALL,
    )


def test_ctrl_c_stops_the_demo_quickly_and_cleanly() -> None:
    marker = uuid.uuid4().hex
    demo = _Demo(marker)
    try:
        nats_pid, tmp = _wait_for_runs(demo)
        # Outside the job's process group, the embedded NATS is not killed by the
        # Ctrl-C under rote's feet: rote stops it after its services are done with it.
        assert os.getpgid(nats_pid) != demo.proc.pid
        # What a terminal does on Ctrl-C: SIGINT to every process of the foreground job.
        os.killpg(demo.proc.pid, signal.SIGINT)
        err = _assert_interrupted(demo)
    finally:
        _kill(demo)
    # The embedded NATS outlived the signal and was stopped in order: no reconnect storm.
    assert "nats_disconnected" not in err and "Connect call failed" not in err
    assert not Path(f"/proc/{nats_pid}").exists()
    assert not tmp.exists()
    assert wait_gone(marker) == []


def test_sigterm_stops_the_demo_and_removes_its_temp_dir() -> None:
    marker = uuid.uuid4().hex
    demo = _Demo(marker)
    try:
        nats_pid, tmp = _wait_for_runs(demo)
        assert tmp.name.startswith("rote-demo-") and tmp.is_dir()
        demo.proc.send_signal(signal.SIGTERM)  # to rote alone, as a service manager would
        _assert_interrupted(demo)
    finally:
        _kill(demo)
    assert not Path(f"/proc/{nats_pid}").exists()
    assert not tmp.exists()
    assert wait_gone(marker) == []


def _kill(demo: _Demo) -> None:
    if demo.proc.poll() is None:
        os.killpg(demo.proc.pid, signal.SIGKILL)
        demo.proc.wait()
