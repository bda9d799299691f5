"""Every contract type by name, for `rote schema` and the round-trip tests."""

from __future__ import annotations

import msgspec

from contracts import errors, executors, llm, runs, system, tasks, tools, traces
from contracts.base import Command, Empty, Event, Reply


def _structs(*modules: object) -> dict[str, type[msgspec.Struct]]:
    found: dict[str, type[msgspec.Struct]] = {}
    for module in modules:
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, msgspec.Struct)
                and value not in (Command, Event, Reply)
                and value.__module__ == module.__name__  # type: ignore[attr-defined]
            ):
                found[name] = value
    return found


CONTRACTS: dict[str, type[msgspec.Struct]] = {
    **_structs(tasks, runs, llm, tools, traces, executors, system, errors),
    # The request of the queries that take no arguments (system.info, llm.models, ...).
    "Empty": Empty,
}


def json_schemas() -> dict[str, dict[str, object]]:
    """JSON Schema of every contract, keyed by contract name."""
    return {name: msgspec.json.schema(cls) for name, cls in sorted(CONTRACTS.items())}
