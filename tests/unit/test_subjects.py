"""The subject table is consistent: every durable subject lands in exactly one stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from alnair_common import PermanentError, UnknownSubjectError, subjects

ROOT = Path(__file__).resolve().parents[2]


def _stream_covering(subject: str) -> list[str]:
    def covers(filter_: str, concrete: str) -> bool:
        f, c = filter_.split("."), concrete.split(".")
        for i, token in enumerate(f):
            if token == ">":
                return len(c) > i
            if i >= len(c) or token not in ("*", c[i]):
                return False
        return len(f) == len(c)

    return [s.name for s in subjects.STREAMS if any(covers(f, subject) for f in s.subjects)]


@pytest.mark.parametrize("spec", subjects.SUBJECTS, ids=lambda s: s.pattern)
def test_durable_subjects_live_in_their_one_stream(spec: subjects.SubjectSpec) -> None:
    example = spec.wildcard.replace("*", "x")
    covering = _stream_covering(example)
    if spec.transport is subjects.Transport.STREAM:
        assert covering == [spec.stream]
    else:
        assert covering == [], f"{spec.pattern} is {spec.transport.value} but stored in {covering}"


def test_patterns_are_lower_case_and_prefixed() -> None:
    for spec in subjects.SUBJECTS:
        assert spec.pattern.startswith("alnair.")
        assert spec.pattern == spec.pattern.lower()


def test_formatters_produce_subjects_of_their_table_entry() -> None:
    cases = {
        subjects.node_inventory("gpu-node-1"): "alnair.node.<node>.inventory",
        subjects.cuda_metrics("n1", "uid-42"): "alnair.metrics.cuda.<node>.<workload>",
        subjects.job_state("resnet"): "alnair.job.<name>.state",
        subjects.health("scheduler"): "alnair.health.<service>",
        subjects.workload_events(): "alnair.workload.events",
    }
    for subject, pattern in cases.items():
        assert subjects.spec_for(subject).pattern == pattern


@pytest.mark.parametrize("name", ["ip-10-0-0-1.ec2.internal", "x y", "*", ">", "gpu:0", "nœud"])
def test_names_with_dots_or_wildcards_become_safe_reversible_tokens(name: str) -> None:
    subject = subjects.node_inventory(name)
    tok = subject.split(".")[2]
    assert len(subject.split(".")) == 4 and not set(tok) & set(".*> ")
    assert subjects.spec_for(subject).pattern == "alnair.node.<node>.inventory"
    assert subjects.name_of(tok) == name


def test_plain_names_are_their_own_token() -> None:
    assert subjects.token("gpu-node_7") == "gpu-node_7"


def test_empty_name_is_refused() -> None:
    with pytest.raises(PermanentError, match="empty name"):
        subjects.node_inventory("")


def test_unknown_subject_is_an_error() -> None:
    with pytest.raises(UnknownSubjectError, match="alnair.nope"):
        subjects.spec_for("alnair.nope")


def test_subject_doc_is_current() -> None:
    doc = (ROOT / "docs" / "subjects.md").read_text()
    assert doc == subjects.document(), "stale: run scripts/gen-proto"


def test_retention_caps_fit_the_servers_store() -> None:
    """JetStream reserves every stream's and bucket's byte cap; together they must fit the
    file store the Kubernetes bundle gives NATS (8 GB) with room to spare."""
    total = sum(s.max_bytes for s in subjects.STREAMS) + sum(b.max_bytes for b in subjects.BUCKETS)
    assert all(s.max_bytes > 0 and s.max_age_seconds > 0 for s in subjects.STREAMS)
    assert all(b.max_bytes > 0 for b in subjects.BUCKETS)
    assert total < 0.6 * 8e9, f"{total / 1e9:.1f} GB of caps"


def test_asyncapi_document_is_current_and_consistent() -> None:
    """docs/asyncapi.json is generated from the table (scripts/gen-proto) and every reference
    in it resolves: channels to messages, operations to channels, parameters to the address."""
    import json
    import re

    from alnair_common import asyncapi

    committed = (ROOT / "docs" / "asyncapi.json").read_text()
    assert committed == asyncapi.render(), "stale: run scripts/gen-proto"
    doc = json.loads(committed)
    assert doc["asyncapi"].startswith("3.")
    messages = doc["components"]["messages"]
    assert len(doc["channels"]) == len(subjects.SUBJECTS)
    for cid, channel in doc["channels"].items():
        for ref in channel["messages"].values():
            assert ref["$ref"].rsplit("/", 1)[-1] in messages, (cid, ref)
        placeholders = set(re.findall(r"{([a-z_]+)}", channel["address"]))
        assert placeholders == set(channel.get("parameters", {})), cid
        spec = subjects.spec_for(re.sub(r"{[a-z_]+}", "x", channel["address"]))
        assert channel["x-transport"] == spec.transport.value
    for oid, op in doc["operations"].items():
        cid = op["channel"]["$ref"].rsplit("/", 1)[-1]
        assert cid in doc["channels"], oid
        for ref in op["messages"]:
            assert ref["$ref"].rsplit("/", 1)[-1] in doc["channels"][cid]["messages"], oid
    assert set(doc["x-buckets"]) == {b.name for b in subjects.BUCKETS}
