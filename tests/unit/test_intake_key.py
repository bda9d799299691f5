"""Which intake commands count as the same command (applied once)."""

from __future__ import annotations

from nats.aio.msg import Msg

from services.scheduler.service import intake_key


def delivered(seq: int, stored_ns: int, times: int = 1, msg_id: str | None = None) -> Msg:
    # The reply subject JetStream gives a delivery: stream, consumer, delivery count,
    # stream sequence, consumer sequence, time stored (ns), pending.
    reply = f"$JS.ACK.ROTE_INTAKE.scheduler-intake.{times}.{seq}.{seq}.{stored_ns}.0"
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    return Msg(_client=None, subject="rote.intake.tasks.run", reply=reply, headers=headers)  # type: ignore[arg-type]


def test_a_redelivery_has_the_same_key() -> None:
    assert intake_key(delivered(7, 1_700_000_000_000_000_000)) == intake_key(
        delivered(7, 1_700_000_000_000_000_000, times=2)
    )


def test_a_recreated_stream_reusing_a_sequence_gives_a_new_key() -> None:
    before = intake_key(delivered(7, 1_700_000_000_000_000_000))
    after = intake_key(delivered(7, 1_700_000_500_000_000_000))
    assert before != after


def test_the_producers_message_id_is_the_key_when_there_is_one() -> None:
    assert intake_key(delivered(7, 1, msg_id="pause-news-1")) == "pause-news-1"
    assert intake_key(delivered(9, 2, msg_id="pause-news-1")) == "pause-news-1"
