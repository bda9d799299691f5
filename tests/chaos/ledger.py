"""What the chaos suite counts and judges: the faults it injected, every run event as
core NATS carried it, and, per run, whether its effects happened once.

The targets (issue 30): no run lost, no run ended twice, no action executed twice, and
every action whose outcome could not be told reported as `needs_attention` (its task
paused) instead of guessed.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import anyio
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import NotFoundError

from contracts import subjects as s
from contracts.effects import Effect
from contracts.runs import RunEvent
from contracts.tasks import TaskView
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode
from services.kernel.replay_read import read_all

TERMINAL = ("completed", "failed")
# How the form script of the stand-in answers when its submit came back as failed.
GUESSED_NOT_DONE = "I could not fill the form"


@dataclass(frozen=True)
class Fault:
    kind: str  # runner_kill, nats_sigterm, nats_sigkill, leader_kill
    where: str  # the scenario, e.g. "replay/during_submit"
    at: float = field(default_factory=time.monotonic)


class FaultLog:
    """The faults one test injected; every test asserts its planned number."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.faults: list[Fault] = []
        self.notes: list[str] = []
        self.began = time.monotonic()

    def injected(self, kind: str, where: str) -> None:
        self.faults.append(Fault(kind, where))

    def __len__(self) -> int:
        return len(self.faults)

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults))


class RunWatch:
    """Every run event published on core NATS, including the ones the stream drops as
    duplicates of a Nats-Msg-Id it has seen: a second execution of a run that republishes
    its ending under the same id shows here, not in the stream."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.seen: dict[str, list[tuple[str, bytes]]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> RunWatch:
        async def on_event(msg: Msg) -> None:
            run_id, event = msg.subject.split(".")[-2:]
            self.seen.setdefault(run_id, []).append((event, msg.data))

        self._sub = await self.bus.nc.subscribe(s.run_events_of(), cb=on_event)
        await routed(self.bus.nc)
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    def endings(self, run_id: str) -> list[RunEvent]:
        """The run's distinct terminal events as published. One delivery's ending
        published again (a retry across an election, a later delivery republishing
        it) is one ending; another delivery's ending is a second."""
        distinct: dict[tuple[object, ...], RunEvent] = {}
        for event, data in self.seen.get(run_id, []):
            if event in TERMINAL:
                ending = decode(data, RunEvent)
                distinct.setdefault((ending.event, ending.reason, ending.attempt), ending)
        return list(distinct.values())

    def started(self, run_id: str) -> int:
        return len({d for e, d in self.seen.get(run_id, []) if e == "started"})


async def journal_of(bus: Bus, run_id: str) -> list[Effect] | None:
    """The run's effect journal as it stands (the latest entry of each of its keys in
    the rote_effects bucket, contracts/effects.py), or None on a build that keeps none."""
    stream = f"KV_{s.BUCKET_EFFECTS}"
    try:
        await bus.js.stream_info(stream)
    except NotFoundError:
        return None
    latest: dict[str, bytes] = {}
    for msg in await read_all(bus.js, stream, f"$KV.{s.BUCKET_EFFECTS}.{run_id}.>"):
        latest[msg.subject] = msg.data
    return [
        decode(data, Effect)
        for subject, data in latest.items()
        if data and not subject.endswith(".finished")
    ]


def journal_problems(journal: list[Effect], ended: RunEvent | None) -> list[str]:
    """What the run's journal says against the targets: every action's outcome settled,
    one in doubt only in a run that ended needs_attention, and no submit done twice."""
    problems = [
        f"journal: {e.key} ({e.tool}) still intended after the run ended"
        for e in journal
        if e.state == "intended" and ended is not None
    ]
    doubtful = [e.key for e in journal if e.state == "in_doubt"]
    if doubtful and (ended is None or ended.reason != "needs_attention"):
        problems.append(f"journal: {', '.join(doubtful)} in doubt, run not needs_attention")
    submits = [e for e in journal if e.tool == "browser_fill_form" and e.state == "done"]
    if len(submits) > 1:
        problems.append(f"journal: the submit done {len(submits)} times")
    return problems


async def stored_run_events(bus: Bus, run_id: str) -> list[RunEvent]:
    msgs = await read_all(bus.js, s.STREAM_RUNS, s.run_events_of(run_id=run_id))
    return [decode(m.data, RunEvent) for m in msgs]


async def wait_ended(bus: Bus, run_id: str, timeout: float) -> RunEvent | None:
    """The run's terminal event once the stream has it; None if it has none within
    `timeout` (a lost run). NATS trouble while looking is waited out."""
    with anyio.move_on_after(timeout):
        while True:
            try:
                for event in await stored_run_events(bus, run_id):
                    if event.event in TERMINAL:
                        return event
            except Exception:  # NATS away for a moment (a restart, an election)
                pass
            await anyio.sleep(0.25)
    return None


@dataclass
class Case:
    """One run under one fault: which task (and form key) it ran, and the posts its
    form had before the run began (the run's own effects are the ones after)."""

    name: str
    task_id: str
    key: str
    run_id: str = ""
    posts_before: int = 0
    # The fault that hit it landed after the run had ended (a race the test cannot
    # rule out for the last boundary of a replay): noted in the report.
    note: str = ""


@dataclass
class Verdict:
    case: Case
    outcome: str  # completed, failed:<reason>, lost
    posts: int
    endings: int
    deliveries: int
    problems: list[str]
    error: str | None = None
    result: str | None = None

    def line(self) -> str:
        flag = "FAIL" if self.problems else "ok"
        text = (
            f"{flag:4} {self.case.name:34} {self.outcome:40} posts={self.posts}"
            f" endings={self.endings} starts={self.deliveries}"
        )
        if self.problems:
            text += "  <- " + "; ".join(self.problems)
        if self.error and not self.outcome.startswith("completed"):
            text += f"  [{self.error[:160]}]"
        elif self.result:
            text += f"  [{self.result[:60]}]"
        if self.case.note:
            text += f"  ({self.case.note})"
        return text


def judge(
    case: Case,
    ended: RunEvent | None,
    endings: list[RunEvent],
    posts: int,
    deliveries: int,
    task: TaskView | None,
    journal: list[Effect] | None = None,
) -> Verdict:
    """The targets, for one run. `posts`: how many times its form reached the site."""
    problems: list[str] = []
    if ended is None:
        outcome = "lost"
        seen = f" (published {len(endings)} on core NATS, never stored)" if endings else ""
        problems.append(f"run lost: no terminal event in ROTE_RUNS{seen}")
    else:
        outcome = "completed" if ended.event == "completed" else f"failed:{ended.reason}"
        # How it ended: by replay, by full run, by a full run after its replay broke.
        outcome += f" {ended.source or '-'}{'+fallback' if ended.fell_back else ''}"
    if len(endings) > 1:
        kinds = ",".join(f"{e.event}@{e.attempt}" for e in endings)
        problems.append(f"ended {len(endings)} times ({kinds})")
    if posts > 1:
        problems.append(f"form submitted {posts} times")
    if ended is not None and ended.event == "completed":
        if posts != 1:
            problems.append(f"completed with {posts} submits")
        elif GUESSED_NOT_DONE in (ended.result or ""):
            # The stand-in answers so when its fill_form call came back failed: the run
            # was told its submit did not happen, and the site got it.
            problems.append("completed saying its submit failed, though the site got it")
    if ended is not None and ended.event == "failed":
        if ended.reason == "needs_attention":
            if task is not None and task.status != "paused":
                problems.append(f"needs_attention but its task is {task.status}")
        elif posts > 0:
            # Failing before acting (an outage, an election) breaks no target; failing
            # after the site got the submit, with any other reason, is a guess.
            problems.append(
                f"failed {ended.reason} after its submit reached the site: not needs_attention"
            )
    if journal is not None:
        problems.extend(journal_problems(journal, ended))
    return Verdict(
        case,
        outcome,
        posts,
        len(endings),
        deliveries,
        problems,
        error=ended.error if ended else None,
        result=ended.result if ended else None,
    )


def report(title: str, verdicts: list[Verdict], faults: FaultLog) -> str:
    dupes = sum(1 for v in verdicts if v.posts > 1)
    lines = [
        f"{title}: {len(faults)} faults injected {faults.by_kind()}, {len(verdicts)} runs,"
        f" {dupes} with a duplicate submit,"
        f" {sum(1 for v in verdicts if v.problems)} breaking a target",
        *(v.line() for v in verdicts),
        "faults: "
        + ", ".join(f"{f.kind} {f.where} @{f.at - faults.began:.0f}s" for f in faults.faults),
        *faults.notes,
    ]
    return "\n".join(lines)


# Every report of this session, for the terminal summary (conftest.py).
REPORTS: list[tuple[str, int, int]] = []


def assert_targets(title: str, verdicts: list[Verdict], faults: FaultLog, planned: int) -> None:
    """Print the report and hold the runs to the targets: at least the `planned` faults
    injected, and no run missing one."""
    text = report(title, verdicts, faults)
    print(text)
    REPORTS.append((text, len(faults), sum(1 for v in verdicts if v.posts > 1)))
    assert len(faults) >= planned, f"{len(faults)} faults injected of {planned} planned"
    assert [v.line() for v in verdicts if v.problems] == []
