"""Hypothesis strategies built from msgspec's own type information, so generated
values respect every constraint a contract declares (patterns, bounds, tags)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

_json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _bounded_int(t: mi.IntType) -> st.SearchStrategy[int]:
    lo = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**40))
    hi = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**40)
    return st.integers(lo, hi)


def _bounded_float(t: mi.FloatType) -> st.SearchStrategy[float]:
    lo = t.ge if t.ge is not None else t.gt
    hi = t.le if t.le is not None else t.lt
    return st.floats(
        min_value=lo,
        max_value=hi,
        exclude_min=t.gt is not None,
        exclude_max=t.lt is not None,
        allow_nan=False,
        allow_infinity=False,
    )


def _text(t: mi.StrType) -> st.SearchStrategy[str]:
    if t.pattern:
        return st.from_regex(t.pattern, fullmatch=True)
    return st.text(min_size=t.min_length or 0, max_size=t.max_length or 24)


def strategy_for(t: mi.Type) -> st.SearchStrategy[Any]:
    match t:
        case mi.StructType():
            return st.builds(t.cls, **{f.name: strategy_for(f.type) for f in t.fields})
        case mi.Metadata():
            return strategy_for(t.type)
        case mi.UnionType():
            options = [strategy_for(x) for x in t.types if not isinstance(x, mi.CustomType)]
            return st.one_of(*options)
        case mi.ListType():
            return st.lists(strategy_for(t.item_type), min_size=t.min_length or 0, max_size=3)
        case mi.DictType():
            return st.dictionaries(strategy_for(t.key_type), strategy_for(t.value_type), max_size=3)
        case mi.StrType():
            return _text(t)
        case mi.IntType():
            return _bounded_int(t)
        case mi.FloatType():
            return _bounded_float(t)
        case mi.BoolType():
            return st.booleans()
        case mi.NoneType():
            return st.none()
        case mi.LiteralType():
            return st.sampled_from(t.values)
        case mi.DateTimeType():
            return st.datetimes(timezones=st.just(UTC))
        case mi.DateType():
            return st.dates()
        case mi.AnyType():
            return json_values
        case mi.CustomType() if t.cls is msgspec.UnsetType:
            return st.just(msgspec.UNSET)
    raise NotImplementedError(f"no strategy for {t!r}")


def contract_values(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    return strategy_for(mi.type_info(cls))
