"""Signatures on the stand-in's thinking blocks, so it can tell (as the real API does)
when a later request dropped, reordered or altered an earlier assistant turn.

Each thinking block's signature, and each redacted_thinking block's data, is an HMAC
over its place in the turn's thinking sequence, that whole sequence (every thinking and
redacted_thinking block in order, with the thinking text), and the turn's other blocks
(text, tool_use). So dropping, reordering, duplicating or altering any thinking block,
or changing the text or a tool input, breaks every signature of the turn: a turn left
with only its redacted_thinking no longer verifies.
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


def _thinking_sequence(blocks: list[dict[str, Any]]) -> list[list[str]]:
    """The turn's thinking blocks in order, as the signatures bind them: the type, and
    the text of a thinking block (a redacted block's data is its own MAC)."""
    sequence: list[list[str]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "thinking":
            sequence.append(["thinking", str(block.get("thinking", ""))])
        elif kind == "redacted_thinking":
            sequence.append(["redacted_thinking"])
    return sequence


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


def _mac(key: bytes, kind: str, position: int, blocks: list[dict[str, Any]]) -> str:
    signed = [kind, position, _thinking_sequence(blocks), _turn_body(blocks)]
    digest = hmac.new(key, _canonical(signed), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _expected(key: bytes, kind: str, position: int, blocks: list[dict[str, Any]]) -> str:
    prefix = _SIG_PREFIX if kind == "thinking" else _REDACTED_PREFIX
    return prefix + _mac(key, kind, position, blocks)


def sign_turn(key: bytes, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`blocks` (a whole assistant turn) with the signature of every thinking block and
    the data of every redacted_thinking block filled in; what those held is ignored."""
    signed: list[dict[str, Any]] = []
    position = 0
    for block in blocks:
        kind = block.get("type")
        if kind in _THINKING_TYPES:
            field = "signature" if kind == "thinking" else "data"
            block = {**block, field: _expected(key, str(kind), position, blocks)}
            position += 1
        signed.append(block)
    return signed


def verify_turn(key: bytes, turn: list[dict[str, Any]]) -> str | None:
    """None when the thinking blocks of this assistant turn are the ones it was given
    with, intact and in order; else why not."""
    position = 0
    for index, block in enumerate(turn):
        kind = block.get("type")
        if kind not in _THINKING_TYPES:
            continue
        expected = _expected(key, str(kind), position, turn)
        position += 1
        if kind == "thinking":
            if not _same(block.get("signature"), expected):
                return f"content.{index}: Invalid `signature` in `thinking` block"
        elif not _same(block.get("data"), expected):
            return f"content.{index}: Invalid `data` in `redacted_thinking` block"
    return None


def _same(presented: Any, expected: str) -> bool:
    # As bytes: compare_digest refuses str with non-ASCII characters (a forged block may
    # hold any).
    return hmac.compare_digest(str(presented or "").encode(), expected.encode())
