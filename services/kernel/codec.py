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


class Decoder:
    """A msgspec decoder whose every bad input is a msgspec error, so each caller's
    handling of bad input covers it: JSON nested deeper than Python's stack allows (a
    RecursionError) and bytes that are not UTF-8 (a UnicodeDecodeError) included."""

    __slots__ = ("_decode",)

    def __init__(self, type_: Any) -> None:
        self._decode = msgspec.json.Decoder(type_).decode

    def decode(self, data: bytes | str) -> Any:
        try:
            return self._decode(data)
        except RecursionError:
            raise msgspec.ValidationError("the JSON is nested too deeply") from None
        except UnicodeDecodeError:
            raise msgspec.DecodeError("the message is not valid UTF-8") from None


@cache
def decoder(type_: Any) -> Decoder:
    return Decoder(type_)


def decode(data: bytes | str, type_: type[T]) -> T:
    # Any type is a cache key (hashable), a union such as `A | B` too.
    key: Any = type_
    result: T = decoder(key).decode(data)
    return result


def decode_stored(data: str | Any, type_: type[T]) -> T:
    """A value stored as JSON text; plain data (what earlier versions stored) is
    converted instead."""
    if isinstance(data, str):
        return decode(data, type_)
    return msgspec.convert(data, type_)


def nesting_depth(value: Any) -> int:
    """How many lists/dicts deep a JSON value goes (a scalar: 0), without recursion: the
    point is to refuse what a recursive walk (or Python's stack) cannot take."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in children)
    return deepest
