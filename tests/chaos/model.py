"""rote's stand-in model with gates: the n-th model call of a task (told apart by the
form key in its prompt) can be held in flight until the test lets it go, so that a fault
lands between two steps of a full run (the model decides each next step)."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from typing import Any

from services.dev.standin.server import StandinServer
from tests.chaos.site import MAX_HOLD_S, Hold

_KEY = re.compile(r"/f/(?P<key>[A-Za-z0-9_-]+)")


def prompt_key(body: Any) -> str | None:
    """The form key of the task a Messages request is for: from its first message (the
    task's prompt; later turns quote pages, which name other paths)."""
    try:
        first = body["messages"][0]
    except (KeyError, IndexError, TypeError):
        return None
    found = _KEY.search(json.dumps(first))
    return found["key"] if found else None


class GatedStandin(StandinServer):
    """For the form task (FillForm in services/dev/standin/scripts.py) of one key, call
    1 decides to open the form, 2 to fill and submit it, 3 to read the page, 4 answers:
    holding call 2 stops a run just before its submit, call 3 just after it (its result
    is in the conversation), call 4 just after the read."""

    def __init__(self) -> None:
        super().__init__()
        self._gate_lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self._holds: dict[tuple[str, int], Hold] = {}

    def hold_call(self, key: str, n: int) -> Hold:
        """Hold the `n`-th model call (counted from 1 over all the task's runs)."""
        hold = Hold("POST", key)
        with self._gate_lock:
            self._holds[(key, n)] = hold
        return hold

    def calls_of(self, key: str) -> int:
        with self._gate_lock:
            return self.calls[key]

    def release_all(self) -> None:
        with self._gate_lock:
            holds, self._holds = list(self._holds.values()), {}
        for hold in holds:
            hold.release()

    def record(self, body: Any) -> None:
        # Called on the request's own handler thread before it is answered: blocking
        # here keeps the call in flight.
        super().record(body)
        key = prompt_key(body)
        if key is None:
            return
        with self._gate_lock:
            self.calls[key] += 1
            hold = self._holds.pop((key, self.calls[key]), None)
        if hold is not None:
            hold.arrived.set()
            hold.released.wait(MAX_HOLD_S)

    def stop(self) -> None:
        self.release_all()
        super().stop()
