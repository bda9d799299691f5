"""Storing msgspec Structs in eventsourcing's JSON without letting the library read
inside them.

eventsourcing's JSON decoder takes any object of exactly the keys `_type_` and `_data_`
for one of its own encoded values. User data can have that shape (a tool input, a
condition's input), and stored as nested objects it would make the event unreadable,
and with it the whole aggregate. So a Struct is stored as JSON text: one string, which
the decoder does not look into. Values an earlier version stored as nested objects
still read.
"""

from __future__ import annotations

from typing import Any

import msgspec
from eventsourcing.persistence import Transcoding

from services.kernel.codec import decode_stored, encode


class StructAsText(Transcoding):
    """A transcoding that stores one Struct type as JSON text under a stable name."""

    def __init__(self, kind: type[msgspec.Struct], name: str) -> None:
        self.type = kind
        self.name = name

    def encode(self, obj: msgspec.Struct) -> str:
        return encode(obj).decode()

    def decode(self, data: str | dict[str, Any]) -> Any:
        return decode_stored(data, self.type)
