"""How much of a run's outcome its events carry: a terminal event must fit one NATS
message (the server refuses a larger one, and a run whose ending cannot be published
is redelivered and runs again). No NATS here: service.py stores what is cut off."""

from __future__ import annotations

from services.kernel.secrets import redact
from services.kernel.text import cut_text

# An error quotes what broke the run (a tool's error, a model's refusal), each bounded
# where it comes from; this bounds what they add up to in one event.
MAX_EVENT_ERROR_CHARS = 4000
# A stand-in for the reference the event will carry, to measure the event with it.
REF_PLACEHOLDER = "sha256:" + "0" * 64
# Bound what an unexpected error adds to an abandoned run's event.
MAX_ABANDON_ERROR_CHARS = 500


def abandon_error(failure: BaseException) -> str:
    """What an abandoned run's event says broke it, masked and then cut to its bound.
    Masked whole, not only when it is cut: a short error can quote a secret too."""
    error = redact(f"{type(failure).__name__}: {failure}")
    return cut_text(error, MAX_ABANDON_ERROR_CHARS, mark="")
