"""Base classes and shared field types for every contract."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec

# A value that becomes one token of a NATS subject (task ids, run ids): no dots,
# wildcards or whitespace, so it can never change the shape of a subject.
SubjectToken = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="1-64 characters from A-Z a-z 0-9 _ - (used as a NATS subject token)",
    ),
]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
# An operator's reason (pause, delete, invalidate): a sentence, kept in events and views.
MAX_REASON_CHARS = 1000
# Every time rote writes carries its offset; a time without one cannot be compared with
# the others, so an event or reply holding one is rejected when decoded, not later.
UtcDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class Command(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A request someone sends us. Unknown fields are rejected, so a typo in a
    hand-written `nats req` payload is an error rather than a silently ignored field."""


class Reply(msgspec.Struct, kw_only=True):
    """A reply to a command or query. Tolerant of unknown fields for forward compatibility."""


class Event(msgspec.Struct, kw_only=True):
    """Something that happened, published to a JetStream stream. Tolerant decoding:
    an older consumer must keep reading events a newer producer wrote."""


class Empty(Command):
    """A request with no parameters (an empty body or `{}`)."""


def utc_now() -> datetime:
    return datetime.now(UTC)
