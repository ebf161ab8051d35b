"""What each bus identity may publish and subscribe, generated from the subject table.

The NATS server enforces these (one user per role, see :mod:`alnair_common.credentials`), so
a process without credentials cannot connect and a service cannot say what its role does
not say: only the scheduler publishes bind decisions, only adapters publish workload events,
the CLI submits and reads but never decides, the exporter publishes metrics only. The rules
come from ``publishers``/``readers`` in :data:`alnair_common.subjects.SUBJECTS` and
``writers``/``readers`` in ``BUCKETS``, so they cannot drift from the table.

Reading a stream means creating and pulling consumers on it (JetStream delivers to the
reader's own inbox, ``_INBOX.<role>.…``, which only that role may subscribe to); writing a
bucket means publishing on ``$KV.<bucket>.>``. What stays open inside a permitted stream: a
role that reads a stream can also pull from or delete another reader's consumer on that
stream (NATS permissions cannot tell consumers apart by owner); consumers check what they
act on (see the plausibility checks of the scheduler and the adapters).
"""

from __future__ import annotations

from typing import Any

from . import subjects
from .errors import ConfigError
from .subjects import EACH_SERVICE, READ_ALL, ROLES, SERVICES, Transport

JS_API = "$JS.API"


def inbox_prefix(role: str) -> str:
    """The reply-subject prefix of ``role``'s connections; only that role may subscribe to it."""
    return f"_INBOX.{subjects.token(role)}"


def _named(pattern: str, role: str, names: tuple[str, ...]) -> list[str]:
    """The subjects ``role`` gets from one table entry naming ``names`` (publishers/readers)."""
    if role in names:
        return [subjects.wildcard(pattern)]
    if EACH_SERVICE in names and role in SERVICES:
        head = pattern.rsplit(".", 1)[0]
        return [f"{head}.{subjects.token(role)}"]
    return []


def _stream_reader(stream: str) -> list[str]:
    """JetStream API subjects for reading ``stream``: info, direct gets, its consumers, acks."""
    return [
        f"{JS_API}.STREAM.INFO.{stream}",
        f"{JS_API}.STREAM.MSG.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}",
        f"{JS_API}.DIRECT.GET.{stream}.>",
        f"{JS_API}.CONSUMER.CREATE.{stream}",
        f"{JS_API}.CONSUMER.CREATE.{stream}.>",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"{JS_API}.CONSUMER.INFO.{stream}.>",
        f"{JS_API}.CONSUMER.DELETE.{stream}.>",
        f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.>",
        f"{JS_API}.CONSUMER.NAMES.{stream}",
        f"{JS_API}.CONSUMER.LIST.{stream}",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _provisioner(stream: str) -> list[str]:
    """Create a stream or bucket that is missing, or bring its settings to the table's."""
    return [f"{JS_API}.STREAM.CREATE.{stream}", f"{JS_API}.STREAM.UPDATE.{stream}",
            f"{JS_API}.STREAM.INFO.{stream}"]


def permissions(role: str) -> dict[str, Any]:
    """The NATS ``permissions`` block of ``role`` (publish/subscribe allow lists)."""
    if role not in ROLES:
        raise ConfigError(f"unknown bus role {role!r}; the roles are {', '.join(ROLES)}")
    publish: list[str] = [f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES"]
    subscribe: list[str] = [f"{inbox_prefix(role)}.>"]
    read_streams: set[str] = set()
    serves = False
    for spec in subjects.SUBJECTS:
        publish += _named(spec.pattern, role, spec.publishers)
        readers = spec.readers + READ_ALL if spec.transport is not Transport.REQUEST else spec.readers
        mine = _named(spec.pattern, role, readers)
        if spec.transport is Transport.STREAM and mine and spec.stream:
            read_streams.add(spec.stream)
        if spec.transport is Transport.REQUEST and mine:
            serves = True
        subscribe += mine
    if role in READ_ALL:
        subscribe.append(f"{subjects.PREFIX}.>")
    for bucket in subjects.BUCKETS:
        if role in bucket.writers:
            # Writers put, delete and purge keys, and drop old delete markers.
            publish += [f"$KV.{bucket.name}.>", f"{JS_API}.STREAM.PURGE.KV_{bucket.name}"]
        if role in bucket.writers or role in bucket.readers or role in READ_ALL:
            read_streams.add(f"KV_{bucket.name}")
    for stream in sorted(read_streams):
        publish += _stream_reader(stream)
    if role != "cli":
        # Services and the supervisor provision what they use (idempotently, at start).
        for stream in [s.name for s in subjects.STREAMS] + [f"KV_{b.name}" for b in subjects.BUCKETS]:
            publish += _provisioner(stream)
    block: dict[str, Any] = {"publish": {"allow": sorted(set(publish))},
                             "subscribe": {"allow": sorted(set(subscribe))}}
    if serves:
        # nats.micro: discovery ($SRV.PING/INFO/STATS) and answers to whoever asked.
        block["subscribe"]["allow"] = sorted({*block["subscribe"]["allow"], "$SRV.>"})
        block["allow_responses"] = True
    return block


def authorization(public_keys: dict[str, str]) -> dict[str, Any]:
    """The server's ``authorization`` block: one NKey user per role, with its permissions."""
    missing = set(ROLES) - set(public_keys)
    if missing:
        raise ConfigError(f"no public key for bus roles {sorted(missing)}")
    return {"users": [{"nkey": public_keys[role], "permissions": permissions(role)}
                      for role in ROLES]}


def subject_allowed(patterns: list[str], subject: str) -> bool:
    """Whether NATS would let ``subject`` through an allow list (``*`` one token, ``>`` the rest)."""
    have = subject.split(".")
    for pattern in patterns:
        want = pattern.split(".")
        for i, w in enumerate(want):
            if w == ">":
                if len(have) > i:
                    return True
                break
            if i >= len(have) or (w != "*" and w != have[i]):
                break
        else:
            if len(want) == len(have):
                return True
    return False


def may_publish(role: str, subject: str) -> bool:
    return subject_allowed(permissions(role)["publish"]["allow"], subject)


def may_subscribe(role: str, subject: str) -> bool:
    return subject_allowed(permissions(role)["subscribe"]["allow"], subject)
