"""Signatures on the stand-in's thinking blocks, so it can tell (as the real API does)
when a later request dropped or altered an earlier assistant turn.

A signature is an HMAC over the thinking text and every other block of the same turn
(text, tool_use), so changing the thinking, the tool input or the text breaks it.
redacted_thinking data carries its own HMAC over the turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

DEFAULT_KEY = b"rote-standin-signing-key"
_SIG_PREFIX = "standin1."
_REDACTED_PREFIX = "standin-redacted1."
_THINKING_TYPES = ("thinking", "redacted_thinking")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _turn_body(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The signed part of a turn: its non-thinking blocks, reduced to what they mean."""
    body: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind in _THINKING_TYPES:
            continue
        if kind == "tool_use":
            body.append(
                {
                    "type": "tool_use",
                    "id": block.get("id"),
                    "name": block.get("name"),
                    "input": block.get("input"),
                }
            )
        elif kind == "text":
            body.append({"type": "text", "text": block.get("text")})
        else:
            body.append(block)
    return body


def _mac(key: bytes, purpose: str, thinking: str, blocks: list[dict[str, Any]]) -> str:
    digest = hmac.new(
        key, _canonical([purpose, thinking, _turn_body(blocks)]), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign_thinking(key: bytes, thinking: str, turn: list[dict[str, Any]]) -> str:
    return _SIG_PREFIX + _mac(key, "thinking", thinking, turn)


def redacted_data(key: bytes, turn: list[dict[str, Any]]) -> str:
    return _REDACTED_PREFIX + _mac(key, "redacted", "", turn)


def verify_turn(key: bytes, turn: list[dict[str, Any]]) -> str | None:
    """None when every thinking block of this assistant turn is intact, else why not."""
    for index, block in enumerate(turn):
        kind = block.get("type")
        if kind == "thinking":
            expected = sign_thinking(key, str(block.get("thinking", "")), turn)
            if not hmac.compare_digest(str(block.get("signature", "")), expected):
                return f"content.{index}: Invalid `signature` in `thinking` block"
        elif kind == "redacted_thinking" and not hmac.compare_digest(
            str(block.get("data", "")), redacted_data(key, turn)
        ):
            return f"content.{index}: Invalid `data` in `redacted_thinking` block"
    return None
