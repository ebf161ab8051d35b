"""The Alnair bus: typed publish/subscribe, request-reply, durable consumers and KV state,
and replay-then-live reading of streams and buckets with a caught-up signal."""

from ._catch_up import NotCaughtUpError
from ._client import MSG_ID_HEADER, Bus
from ._codec import decode, encode
from ._follower import StreamFollower
from ._jetstream import DurableConsumer, publish_error
from ._kv import TypedKV, Versioned
from ._kv_watch import KVUpdate, KVWatch
from ._streams import ensure_streams

__all__ = [
    "MSG_ID_HEADER",
    "Bus",
    "DurableConsumer",
    "KVUpdate",
    "KVWatch",
    "NotCaughtUpError",
    "StreamFollower",
    "TypedKV",
    "Versioned",
    "decode",
    "encode",
    "ensure_streams",
    "publish_error",
]
