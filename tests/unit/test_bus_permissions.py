"""The server's permission table, checked against the subject table it is generated from."""

from __future__ import annotations

import re

import pytest

from alnair_common import subjects
from alnair_common.bus_permissions import (
    authorization,
    inbox_prefix,
    may_publish,
    may_subscribe,
    permissions,
    subject_allowed,
)
from alnair_common.errors import ConfigError
from alnair_common.subjects import EACH_SERVICE, READ_ALL, ROLES, SERVICES, Transport


def concrete(pattern: str, name: str = "n1") -> str:
    return re.sub(r"<[a-z_]+>", name, pattern)


def test_every_role_named_in_the_table_exists() -> None:
    named = {r for s in subjects.SUBJECTS for r in (*s.publishers, *s.readers)}
    named |= {r for b in subjects.BUCKETS for r in (*b.writers, *b.readers)}
    assert named - {EACH_SERVICE} <= set(ROLES)


def test_every_stream_and_core_subject_has_a_publisher() -> None:
    for spec in subjects.SUBJECTS:
        assert spec.publishers, f"{spec.pattern} has no publisher: nobody could send it"


@pytest.mark.parametrize("spec", subjects.SUBJECTS, ids=lambda s: s.pattern)
@pytest.mark.parametrize("role", ROLES)
def test_publish_rights_are_exactly_the_tables(spec: subjects.SubjectSpec, role: str) -> None:
    if EACH_SERVICE in spec.publishers:
        # Each service its own subject, and no other's.
        own = role in SERVICES
        assert may_publish(role, concrete(spec.pattern, role)) == own
        other = "profiler" if role != "profiler" else "scheduler"
        assert not may_publish(role, concrete(spec.pattern, other))
        return
    assert may_publish(role, concrete(spec.pattern)) == (role in spec.publishers)


@pytest.mark.parametrize("spec", [s for s in subjects.SUBJECTS if s.transport is Transport.CORE],
                         ids=lambda s: s.pattern)
@pytest.mark.parametrize("role", ROLES)
def test_core_subjects_reach_only_their_readers(spec: subjects.SubjectSpec, role: str) -> None:
    assert may_subscribe(role, concrete(spec.pattern)) == (role in spec.readers + READ_ALL)


def test_only_the_scheduler_decides() -> None:
    deciders = {r for r in ROLES if may_publish(r, subjects.sched_bind())}
    assert deciders == {"scheduler"}
    assert {r for r in ROLES if may_publish(r, "$KV.gpu_allocations.gpu-1")} == {"scheduler"}


def test_only_adapters_report_workloads() -> None:
    assert {r for r in ROLES if may_publish(r, subjects.workload_events())} == {"kube-bridge", "local-agent"}
    assert {r for r in ROLES if may_publish(r, "$KV.workload_states.uid-1")} == {"kube-bridge", "local-agent"}


def test_the_cli_submits_and_reads_but_never_decides() -> None:
    assert may_publish("cli", subjects.workload_submit())
    assert may_subscribe("cli", subjects.sched_bind())
    assert may_publish("cli", "$JS.API.CONSUMER.MSG.NEXT.SCHEDULING.some-reader")
    for subject in (subjects.sched_bind(), subjects.workload_events(), subjects.sched_bound(),
                    subjects.cmd_annotate(), "$KV.gpu_allocations.x", "$KV.workload_states.x",
                    "$JS.API.STREAM.CREATE.SCHEDULING", "$JS.API.STREAM.DELETE.SCHEDULING",
                    "$JS.API.STREAM.PURGE.WORKLOADS"):
        assert not may_publish("cli", subject), subject


def test_the_exporter_publishes_metrics_only() -> None:
    bus_subjects = {p for p in permissions("exporter")["publish"]["allow"]
                    if p.startswith(subjects.PREFIX + ".")}
    assert bus_subjects == {"alnair.metrics.gpu.*", "alnair.metrics.cuda.*.*", "alnair.error.exporter"}
    assert not any(p.startswith("$KV.") for p in permissions("exporter")["publish"]["allow"])


def test_nobody_deletes_or_purges_streams() -> None:
    for role in ROLES:
        for stream in subjects.STREAMS:
            for verb in ("DELETE", "PURGE", "MSG.DELETE"):
                assert not may_publish(role, f"$JS.API.STREAM.{verb}.{stream.name}"), (role, verb)
        for bucket in subjects.BUCKETS:
            assert not may_publish(role, f"$JS.API.STREAM.DELETE.KV_{bucket.name}")
            # Only a bucket's writers drop its old delete markers.
            assert may_publish(role, f"$JS.API.STREAM.PURGE.KV_{bucket.name}") == (role in bucket.writers)


def test_inboxes_are_private() -> None:
    for role in ROLES:
        assert may_subscribe(role, f"{inbox_prefix(role)}.abc")
        for other in ROLES:
            if other != role:
                assert not may_subscribe(role, f"{inbox_prefix(other)}.abc"), (role, other)
        assert not may_subscribe(role, "_INBOX.abc")


def test_a_stream_is_read_only_by_its_readers() -> None:
    # The profiler reads workload events, not bind decisions.
    assert may_publish("profiler", "$JS.API.CONSUMER.MSG.NEXT.WORKLOADS.profiler-workloads")
    assert not may_publish("profiler", "$JS.API.CONSUMER.MSG.NEXT.SCHEDULING.kube-bridge-bind")
    assert not may_publish("profiler", "$JS.API.CONSUMER.CREATE.SCHEDULING.x.alnair.sched.bind")


def test_responders_may_answer_and_askers_may_ask() -> None:
    for role in SERVICES:
        assert may_subscribe(role, subjects.health(role))
        assert not may_subscribe(role, subjects.health("scheduler" if role != "scheduler" else "profiler"))
        assert permissions(role).get("allow_responses") is True
    assert may_publish("cli", subjects.health("scheduler")) and may_publish("cli", subjects.platform_status())
    assert may_subscribe("platform", subjects.platform_status())
    assert "allow_responses" not in permissions("cli")


def test_subject_matching_follows_nats() -> None:
    assert subject_allowed(["a.*.c"], "a.b.c") and not subject_allowed(["a.*.c"], "a.b.c.d")
    assert subject_allowed(["a.>"], "a.b.c") and not subject_allowed(["a.>"], "a")
    assert not subject_allowed(["a.b"], "a.b.c") and subject_allowed(["a.b"], "a.b")


def test_unknown_role_and_missing_key_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="unknown bus role 'root'"):
        permissions("root")
    with pytest.raises(ConfigError, match="no public key for bus roles"):
        authorization({"cli": "UABC"})
