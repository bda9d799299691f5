"""The event-sourcing idiom (services/kernel/aggregate.py) and its command loop
(services/kernel/commands.py), on a small aggregate of their own: events stored under
topics naming them, user data as text, the library's upcasters on events and snapshots,
and a command retried when another writer saved first."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder
from eventsourcing.utils import get_topic

from services.kernel.aggregate import Folded, Stored, StoredCreation
from services.kernel.commands import CommandRunner, Retries
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.kernel.transcoding import StructAsText

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
# Objects the library's JSON reader would take for its own encoded values.
LOOKALIKE = {"_type_": "datetime_iso", "_data_": "not a time"}


class Opened(msgspec.Struct, kw_only=True):
    name: str
    notes: dict[str, Any]


class Added(msgspec.Struct, kw_only=True):
    amount: int
    at: datetime


class Tally(msgspec.Struct, kw_only=True):
    name: str
    notes: dict[str, Any]
    total: int = 0


class Counter(Folded[Tally, Opened, Added]):
    class Opened(StoredCreation):
        event_type = Opened
        text_fields = ("notes",)

    class Added(Stored):
        event_type = Added
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["amount"] = state.pop("n")  # v1 called it n

    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["state"] = Tally(name=state.pop("name"), notes={}, total=state.pop("total"))

    @classmethod
    def start(cls, event: Opened) -> Tally:
        return Tally(name=event.name, notes=event.notes)

    def fold(self, event: Added) -> None:
        self.state.total += event.amount

    @classmethod
    def id_of(cls, opening: Opened) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_URL, opening.name)

    def context(self) -> dict[str, Any]:
        return {"name": self.state.name}


class Counters(Application[uuid.UUID]):
    name = "counters"
    is_snapshotting_enabled = True

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(StructAsText(Tally, "test_tally"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return application_env(Settings(data_dir=tmp_path, event_store="sqlite"), "counters")


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Counters]:
    counters = Counters(env=env)
    yield counters
    counters.close()


def test_decided_events_are_stored_under_topics_naming_them(app: Counters) -> None:
    counter = Counter.open(Opened(name="c", notes={"fields": LOOKALIKE}))
    counter.record([Added(amount=2, at=T0), Added(amount=3, at=T0)])
    assert (counter.version, counter.state.total) == (3, 5)
    app.save(counter)
    topics = [n.topic for n in app.recorder.select_notifications(start=1, limit=10)]
    assert topics == [get_topic(Counter.Opened)] + [get_topic(Counter.Added)] * 2
    assert topics[-1].endswith(":Counter.Added")
    stored = list(app.events.get(counter.id))
    assert [type(e) for e in stored] == [Counter.Opened, Counter.Added, Counter.Added]
    assert stored[1].event == Added(amount=2, at=T0)  # type: ignore[attr-defined]
    assert vars(stored[1])["name"] == "c"  # what context() adds to every event
    # User data the library would misread is stored as text, and reads back as given.
    reread = Counters(env=app.env)
    try:
        again: Counter = reread.repository.get(counter.id)
        assert again.state == Tally(name="c", notes={"fields": LOOKALIKE}, total=5)
    finally:
        reread.close()


def test_open_records_the_opening_event_under_the_id_it_names() -> None:
    opening = Opened(name="c", notes={})
    counter = Counter.open(opening)
    assert (counter.id, counter.version) == (Counter.id_of(opening), Counter.INITIAL_VERSION)
    assert counter.state == Tally(name="c", notes={})
    (created,) = counter.pending_events
    assert isinstance(created, Counter.Opened) and created.event == opening


def test_a_recorded_event_is_the_object_the_library_reads_back(app: Counters) -> None:
    # Carrier.carrying builds a stored event as the library's mapper does (a bare
    # instance given its dict): what it builds must be what a save and a read give.
    counter = Counter.open(Opened(name="c", notes={"fields": LOOKALIKE}))
    counter.record([Added(amount=2, at=T0)])
    for recorded in counter.pending_events:
        read = app.mapper.to_domain_event(app.mapper.to_stored_event(recorded))
        assert type(read) is type(recorded)
        assert vars(read) == vars(recorded)
        assert read == recorded


def test_events_and_snapshots_stored_by_an_earlier_version_are_upcast(app: Counters) -> None:
    counter = Counter.open(Opened(name="c", notes={}))
    counter.record([Added(amount=2, at=T0)])
    app.save(counter)
    (record,) = [
        n
        for n in app.recorder.select_notifications(start=1, limit=10)
        if n.topic == get_topic(Counter.Added)
    ]
    state = app.mapper.transcoder.decode(record.state)
    assert state.pop("class_version") == 2
    state["n"] = state.pop("amount")  # as v1 stored it
    old = app.mapper.to_domain_event(
        dataclasses.replace(record, state=app.mapper.transcoder.encode(state))
    )
    assert old.event == Added(amount=2, at=T0)  # type: ignore[attr-defined]

    app.take_snapshot(counter.id)
    assert app.snapshots is not None
    (snapshot,) = app.snapshots.get(counter.id)
    assert snapshot.state["class_version"] == 2  # type: ignore[attr-defined]
    v1 = {k: v for k, v in snapshot.state.items() if k.startswith("_")}  # type: ignore[attr-defined]
    v1.update(name="c", total=7)  # the attributes one by one, as v1 kept them
    rebuilt = dataclasses.replace(snapshot, state=v1).mutate(None)  # type: ignore[type-var]
    assert rebuilt.state == Tally(name="c", notes={}, total=7)


def test_a_command_that_records_nothing_saves_nothing(app: Counters) -> None:
    runner = CommandRunner(app)
    counter_id = Counter.id_of(Opened(name="c", notes={}))

    def nothing(counter: Counter | None) -> tuple[Counter | None, str]:
        return None, "no change"

    assert runner.run(counter_id, nothing, busy="busy") == "no change"
    assert runner.load(counter_id) is None
    assert app.recorder.max_notification_id() in (None, 0)


def test_a_command_is_run_again_on_what_another_writer_saved(
    app: Counters, env: dict[str, str]
) -> None:
    other = Counters(env=env)
    runner = CommandRunner(app)
    counter = Counter.open(Opened(name="c", notes={}))
    app.save(counter)
    seen: list[int] = []

    def add(current: Counter | None) -> tuple[Counter | None, int]:
        assert current is not None
        seen.append(current.state.total)
        if len(seen) == 1:  # another process saves between this load and this save
            theirs: Counter = other.repository.get(counter.id)
            theirs.record([Added(amount=10, at=T0)])
            other.save(theirs)
        current.record([Added(amount=1, at=T0)])
        return current, current.state.total

    try:
        assert runner.run(counter.id, add, busy="busy") == 11
    finally:
        other.close()
    assert seen == [0, 10]
    assert app.repository.get(counter.id).state.total == 11


def test_a_command_that_always_loses_gives_up_saying_so(app: Counters) -> None:
    runner = CommandRunner(app, retries=Retries(attempts=3, max_wait_s=0.0))
    counter = Counter.open(Opened(name="c", notes={}))
    app.save(counter)

    def stale(current: Counter | None) -> tuple[Counter | None, None]:
        old = Counter.open(Opened(name="c", notes={}))  # version 1 again: its save always conflicts
        old.record([Added(amount=1, at=T0)])
        return old, None

    with pytest.raises(ServiceError) as caught:
        runner.run(counter.id, stale, busy="counter c is busy")
    assert (caught.value.code, caught.value.message) == ("conflict", "counter c is busy")


def test_waits_between_attempts_grow_and_stay_within_the_budget() -> None:
    retries = Retries(base_s=0.01, cap_s=0.05, max_wait_s=0.1)
    for attempt in range(1, 10):
        assert 0 <= retries.wait_s(attempt, 0.0) <= min(0.05, 0.01 * 2 ** (attempt - 1))
    assert retries.wait_s(5, 0.1) == 0.0
