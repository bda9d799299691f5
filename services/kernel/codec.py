"""JSON encoding of contracts, with decoders cached per type (msgspec decoders are
cheap to use and relatively costly to build)."""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


@cache
def decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(type_)


def decode(data: bytes | str, type_: type[T]) -> T:
    return decoder(type_).decode(data)  # type: ignore[no-any-return]
