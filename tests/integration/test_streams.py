"""Stream provisioning is idempotent and repairs drifted configuration."""

from __future__ import annotations

import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.streams import BUCKET_STREAMS, STREAMS, ensure_streams

pytestmark = pytest.mark.anyio


async def test_provisioning_twice_changes_nothing(bus: Bus) -> None:
    first = await ensure_streams(bus.js)
    assert set(first.values()) == {"created"}
    assert {spec.name for spec in STREAMS} == set(s.STREAM_SUBJECTS)
    assert set(first) == set(s.STREAM_SUBJECTS) | set(BUCKET_STREAMS)
    before = {spec.name: (await bus.js.stream_info(spec.name)).config for spec in STREAMS}

    second = await ensure_streams(bus.js)
    assert set(second.values()) == {"unchanged"}
    after = {spec.name: (await bus.js.stream_info(spec.name)).config for spec in STREAMS}
    assert before == after


async def test_drifted_stream_is_updated(bus: Bus) -> None:
    await ensure_streams(bus.js)
    await bus.js.update_stream(
        StreamConfig(name=s.STREAM_RUNS, subjects=[s.RUN_EVENTS_ALL], max_age=60.0)
    )
    outcome = await ensure_streams(bus.js)
    assert outcome[s.STREAM_RUNS] == "updated"
    assert (await bus.js.stream_info(s.STREAM_RUNS)).config.max_age == pytest.approx(90 * 86400)


async def test_work_queue_streams_have_work_queue_retention(bus: Bus) -> None:
    await ensure_streams(bus.js)
    for name in (s.STREAM_WORK, s.STREAM_INTAKE):
        info = await bus.js.stream_info(name)
        assert info.config.retention is not None
        assert RetentionPolicy(info.config.retention) is RetentionPolicy.WORK_QUEUE


async def test_transcripts_expire_with_run_events_and_a_drifted_bucket_is_repaired(
    bus: Bus,
) -> None:
    await ensure_streams(bus.js)
    transcripts = f"KV_{s.BUCKET_TRANSCRIPTS}"
    config = (await bus.js.stream_info(transcripts)).config
    assert config.max_age == pytest.approx(90 * 86400)  # as long as ROTE_RUNS keeps runs
    assert not (await bus.js.stream_info(f"KV_{s.BUCKET_RELAY}")).config.max_age  # forever

    config.max_age, config.duplicate_window = 60.0, 30.0
    await bus.js.update_stream(config)
    outcome = await ensure_streams(bus.js)
    assert outcome[transcripts] == "updated" and outcome[f"KV_{s.BUCKET_RELAY}"] == "unchanged"
    assert (await bus.js.stream_info(transcripts)).config.max_age == pytest.approx(90 * 86400)
