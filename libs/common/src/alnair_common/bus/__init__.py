"""The Alnair bus: typed publish/subscribe, request-reply, durable consumers and KV state."""

from ._client import MSG_ID_HEADER, Bus
from ._codec import decode, encode
from ._jetstream import DurableConsumer, ensure_streams, publish_error
from ._kv import TypedKV, Versioned

__all__ = [
    "MSG_ID_HEADER",
    "Bus",
    "DurableConsumer",
    "TypedKV",
    "Versioned",
    "decode",
    "encode",
    "ensure_streams",
    "publish_error",
]
