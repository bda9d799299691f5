"""Stream provisioning is idempotent and repairs drifted configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.streams import BUCKET_STREAMS, STREAMS, StreamDriftError, ensure_streams

RUNS_FILE = Path(__file__).resolve().parents[2] / "infra" / "streams" / f"{s.STREAM_RUNS}.json"


def runs_file_with(**changes: Any) -> StreamConfig:
    """ROTE_RUNS as an operator creates it from infra/streams, then edits it."""
    return StreamConfig.from_response({**json.loads(RUNS_FILE.read_text()), **changes})


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


async def test_every_field_the_code_defines_is_repaired(bus: Bus) -> None:
    await bus.js.add_stream(
        runs_file_with(
            max_msgs=5,
            max_bytes=4096,
            max_msgs_per_subject=1,
            max_consumers=3,
            allow_rollup_hdrs=True,
            allow_direct=True,
            compression="s2",
        )
    )
    outcome = await ensure_streams(bus.js)
    assert outcome[s.STREAM_RUNS] == "updated"
    config = (await bus.js.stream_info(s.STREAM_RUNS)).config
    assert (config.max_msgs, config.max_bytes, config.max_msgs_per_subject) == (-1, -1, -1)
    assert config.max_consumers == -1
    assert not config.allow_rollup_hdrs and not config.allow_direct
    assert config.compression == "none"
    # The run history is no longer cut to the last 5 events, one per subject.
    for i in range(8):
        await bus.js.publish(s.run_event("t1", "r1", "started"), f'{{"i":{i}}}'.encode())
    assert (await bus.js.stream_info(s.STREAM_RUNS)).state.messages == 8
    assert (await ensure_streams(bus.js))[s.STREAM_RUNS] == "unchanged"


async def test_drift_the_server_cannot_undo_is_an_error_naming_the_field(bus: Bus) -> None:
    await bus.js.add_stream(runs_file_with(deny_delete=True, max_msgs=5))
    with pytest.raises(StreamDriftError) as caught:
        await ensure_streams(bus.js)
    message = str(caught.value)
    assert s.STREAM_RUNS in message and "max_msgs, deny_delete" in message
    assert "can not cancel deny message deletes" in message  # the server's reason


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
