"""Stuck detection: the same tool, with the same input, failing with the same error,
`limit` times in a row ends the run as `stuck`. A success, or any different call or
error, starts the count again."""

from __future__ import annotations

import json
from typing import Any


class StuckDetector:
    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self._last: tuple[str, str, str] | None = None
        self._count = 0

    def observe(self, tool: str, input: dict[str, Any], error: str | None) -> bool:
        """Record one call's outcome; True when the run is stuck."""
        if error is None:
            self._last, self._count = None, 0
            return False
        key = (tool, json.dumps(input, sort_keys=True, default=str), error)
        if key == self._last:
            self._count += 1
        else:
            self._last, self._count = key, 1
        return self._count >= self.limit
