"""Large values stored once in the JetStream object store, by content hash, and passed
around as a reference ("sha256:<hex>") so no message nears NATS' payload limit."""

from __future__ import annotations

import hashlib

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError, ObjectNotFoundError

from contracts import subjects as s

PREFIX = "sha256:"


def reference(data: bytes) -> str:
    return PREFIX + hashlib.sha256(data).hexdigest()


async def put(js: JetStreamContext, data: bytes) -> str:
    ref = reference(data)
    store = await js.object_store(s.BUCKET_BLOBS)
    name = ref.removeprefix(PREFIX)
    try:
        await store.get_info(name)
        return ref  # already stored: content-addressed, so it is the same bytes
    except (ObjectNotFoundError, NotFoundError):
        pass
    await store.put(name, data)
    return ref


async def get(js: JetStreamContext, ref: str) -> bytes:
    if not ref.startswith(PREFIX):
        raise ValueError(f"not a blob reference: {ref!r}")
    store = await js.object_store(s.BUCKET_BLOBS)
    result = await store.get(ref.removeprefix(PREFIX))
    return result.data or b""
