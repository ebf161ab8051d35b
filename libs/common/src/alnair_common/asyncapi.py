"""The bus as an AsyncAPI 3.0 document, generated from the one subject table.

For those who subscribe to Alnair's events with their own tools (Grafana, scripts, other
services): every subject with its parameters, the protobuf message it carries, how it
travels (core, JetStream stream with its retention, request-reply) and who publishes and
reads it. ``scripts/gen-proto`` writes it to ``docs/asyncapi.json``; a test checks that the
committed file is current, so it cannot drift from the code.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import subjects
from .subjects import READ_ALL, SubjectSpec, Transport

PROTOBUF = "application/vnd.google.protobuf;version=3"
_PARAM = re.compile(r"<([a-z_]+)>")


def _channel_id(spec: SubjectSpec) -> str:
    return _PARAM.sub(lambda m: m.group(1), spec.pattern).replace(".", "-")


def _message_id(message: type) -> str:
    return message.DESCRIPTOR.name  # type: ignore[attr-defined]


def _message(message: type) -> dict[str, Any]:
    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    return {
        "name": descriptor.name,
        "title": descriptor.full_name,
        "contentType": "application/x-protobuf",
        "payload": {"schemaFormat": PROTOBUF,
                    "schema": {"$ref": f"proto/{descriptor.file.name}#{descriptor.full_name}"}},
    }


def _stream(name: str) -> subjects.StreamSpec:
    return next(s for s in subjects.STREAMS if s.name == name)


def _channel(spec: SubjectSpec) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": _PARAM.sub(lambda m: "{" + m.group(1) + "}", spec.pattern),
        "description": spec.description,
        "messages": {_message_id(spec.message): {"$ref": f"#/components/messages/{_message_id(spec.message)}"}},
        "x-transport": spec.transport.value,
        "x-published-by": list(spec.publishers),
        "x-read-by": list(spec.readers) + ([] if spec.transport is Transport.REQUEST else list(READ_ALL)),
    }
    params = _PARAM.findall(spec.pattern)
    if params:
        channel["parameters"] = {p: {"description": f"the {p}'s name as a subject token "
                                                    "(alnair_common.subjects.token)"} for p in params}
    if spec.reply is not None:
        channel["messages"][_message_id(spec.reply)] = {
            "$ref": f"#/components/messages/{_message_id(spec.reply)}"}
    if spec.stream:
        stream = _stream(spec.stream)
        channel["x-jetstream"] = {"stream": stream.name, "max_age_seconds": stream.max_age_seconds,
                                  "max_bytes": stream.max_bytes,
                                  "duplicate_window_seconds": stream.duplicate_window_seconds}
    return channel


def _operations(spec: SubjectSpec) -> dict[str, Any]:
    cid = _channel_id(spec)
    ref = {"$ref": f"#/channels/{cid}"}
    if spec.transport is Transport.REQUEST:
        assert spec.reply is not None
        return {f"ask-{cid}": {
            "action": "send", "channel": ref, "summary": spec.description,
            "messages": [{"$ref": f"#/channels/{cid}/messages/{_message_id(spec.message)}"}],
            "reply": {"channel": {"$ref": f"#/channels/{cid}"}, "messages": [
                {"$ref": f"#/channels/{cid}/messages/{_message_id(spec.reply)}"}]}}}
    return {f"receive-{cid}": {
        "action": "receive", "channel": ref, "summary": spec.description,
        "messages": [{"$ref": f"#/channels/{cid}/messages/{_message_id(spec.message)}"}]}}


def document() -> dict[str, Any]:
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for spec in subjects.SUBJECTS:
        for message in (spec.message, spec.reply):
            if message is not None:
                messages[_message_id(message)] = _message(message)
        channels[_channel_id(spec)] = _channel(spec)
        operations.update(_operations(spec))
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Alnair bus",
            "version": "1",
            "description": "Every subject of Alnair's NATS bus (generated from "
                           "alnair_common.subjects by scripts/gen-proto; do not edit). "
                           "Connections authenticate with an NKey per identity; the server "
                           "allows each only what x-published-by / x-read-by name for it.",
        },
        "defaultContentType": "application/x-protobuf",
        "servers": {
            "local": {"host": "127.0.0.1:4222", "protocol": "nats",
                      "description": "`alnair up`'s embedded server (credentials in "
                                     "<data dir>/credentials)"},
            "kubernetes": {"host": "alnair-nats:4222", "protocol": "nats", "protocolVersion": "tls",
                           "description": "the bundle's server, TLS handshake first"},
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
        "x-buckets": {b.name: {"description": b.description, "history": b.history,
                               "max_bytes": b.max_bytes, "written-by": list(b.writers),
                               "read-by": list(b.readers) + list(READ_ALL)}
                      for b in subjects.BUCKETS},
    }


def render() -> str:
    return json.dumps(document(), indent=2) + "\n"
