"""The bus as `alnair up` runs it: NKey authentication and the server's per-role permissions.

Every forgery of the attacks found (a submission that runs a command, a workload event that
frees a card, a bind decision, a write to the allocations) is sent with every identity.
Identities the subject table does not name are refused by the server itself — checked by
bypassing the client's own check and reading the stream afterwards, not trusted from the
client. The identities the table does name are the ones the consumers' plausibility checks
guard (their own tests).
"""

from __future__ import annotations

import nats
import nats.errors
import pytest
from structlog.testing import capture_logs

from alnair.v1 import common_pb2, scheduling_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, ensure_streams, subjects
from alnair_common.bus import encode
from alnair_common.credentials import BusCredentials, new_seed, write_private
from alnair_common.errors import PermissionDeniedError
from alnair_common.subjects import ROLES
from alnair_common.testing.bus_fixtures import SecuredNats
from alnair_common.testing.waiting import wait_for


def forged_submission() -> wl.Workload:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid="evil-1", name="evil"), phase=wl.WORKLOAD_PHASE_PENDING)
    w.command.extend(["bash", "-c", "id > out.txt"])
    return w


def forged_success() -> wl.WorkloadEvent:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid="victim-1", name="train"),
                    phase=wl.WORKLOAD_PHASE_SUCCEEDED)
    return wl.WorkloadEvent(workload=w, sequence=7)


def forged_bind() -> scheduling_pb2.BindDecision:
    return scheduling_pb2.BindDecision(
        workload=common_pb2.WorkloadRef(uid="evil-2", name="big"),
        assignment=common_pb2.GpuAssignment(node="n1", gpu_uuid="GPU-1", memory_gib=80))


FORGERIES = [
    ("submission", subjects.workload_submit(), forged_submission, "WORKLOADS"),
    ("workload-succeeded", subjects.workload_events(), forged_success, "WORKLOADS"),
    ("bind-decision", subjects.sched_bind(), forged_bind, "SCHEDULING"),
]


async def stored(bus: Bus, stream: str, subject: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def test_a_connection_without_credentials_is_refused(secured_nats: SecuredNats) -> None:
    with pytest.raises(PermissionDeniedError, match="refused no credentials"):
        await Bus.connect(secured_nats.server.url, service="intruder", first_connect_attempts=1)


async def test_a_refused_connection_is_one_error_not_a_log_line_per_retry(secured_nats: SecuredNats) -> None:
    """`alnair status --nats-url …` without credentials printed five "nats connection error"
    lines (the refusal and the server dropping the connection, each retry) before its error."""
    with capture_logs() as logs, pytest.raises(PermissionDeniedError, match="refused no credentials"):
        await Bus.connect(secured_nats.server.url, service="intruder", first_connect_attempts=3)
    assert [e for e in logs if e["event"] == "nats connection error"] == []


async def test_a_seed_the_server_does_not_know_is_refused(secured_nats: SecuredNats, tmp_path) -> None:
    stranger = tmp_path / "stranger.nk"
    write_private(stranger, new_seed())
    with pytest.raises(PermissionDeniedError, match="refused the scheduler credentials"):
        await Bus.connect(secured_nats.server.url, service="scheduler", credentials=stranger,
                          first_connect_attempts=1)


async def test_credentials_are_private(secured_nats: SecuredNats) -> None:
    directory = secured_nats.credentials.directory
    assert directory.stat().st_mode & 0o777 == 0o700
    for role in ROLES:
        assert secured_nats.credentials.seed_file(role).stat().st_mode & 0o777 == 0o600
    assert secured_nats.server.config_file.stat().st_mode & 0o777 == 0o600
    again = BusCredentials.ensure(directory)  # a restart keeps the identities
    assert again.public_keys() == secured_nats.credentials.public_keys()


@pytest.mark.parametrize(("name", "subject", "forge", "stream"), FORGERIES, ids=[f[0] for f in FORGERIES])
async def test_forgeries_from_every_identity(secured_nats: SecuredNats, name: str, subject: str,
                                             forge, stream: str) -> None:
    platform = await secured_nats.connect("platform")
    await ensure_streams(platform)
    allowed = subjects.spec_for(subject).publishers
    for role in ROLES:
        bus = await secured_nats.connect(role)
        before = await stored(platform, stream, subject)
        if role in allowed:
            await bus.publish(subject, forge())
            assert await stored(platform, stream, subject) == before + 1, role
            continue
        with pytest.raises(PermissionDeniedError, match=f"{role!r} may not publish"):
            await bus.publish(subject, forge())
        # Past the client's check: the server itself drops it.
        await bus.nc.publish(subject, encode(subject, forge()))
        await bus.nc.flush()
        assert await stored(platform, stream, subject) == before, f"{role} stored a forged {name}"
    async def logged() -> bool:  # the server's own word, written a moment after it judged
        return f'Publish Violation - Subject "{subject}"' in secured_nats.server.log_file.read_text()

    await wait_for(logged, timeout=5, what="the server logging the refused publishes")


@pytest.mark.parametrize("bucket", ["gpu_allocations", "workload_states", "node_inventory"])
async def test_bucket_writes_are_refused_to_all_but_their_writers(secured_nats: SecuredNats,
                                                                   bucket: str) -> None:
    platform = await secured_nats.connect("platform")
    kv = await platform.js.create_key_value(bucket=bucket)
    writers = next(b for b in subjects.BUCKETS if b.name == bucket).writers
    for role in ROLES:
        bus = await secured_nats.connect(role)
        key = f"forged-{role}"
        if role in writers:  # acknowledged by JetStream, so stored before the read below
            await bus.js.publish(f"$KV.{bucket}.{key}", b"\x00")
            assert (await kv.get(key)).value == b"\x00"
            continue
        await bus.nc.publish(f"$KV.{bucket}.{key}", b"\x00")
        await bus.nc.flush()  # the server judged it before answering the flush
        violation = f'Publish Violation - Subject "$KV.{bucket}.{key}"'

        async def logged(line: str = violation) -> bool:  # the log is written a moment later
            return line in secured_nats.server.log_file.read_text()

        await wait_for(logged, timeout=5, what=f"the server refusing {role}'s write")
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await kv.get(key)


async def test_a_role_reads_only_its_streams(secured_nats: SecuredNats) -> None:
    platform = await secured_nats.connect("platform")
    await ensure_streams(platform)
    await (await secured_nats.connect("scheduler")).publish(subjects.sched_bind(), forged_bind())
    # The profiler reads workload events, never bind decisions: no consumer for it there.
    profiler = await secured_nats.connect("profiler")
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError)):
        sub = await profiler.js.pull_subscribe(subjects.sched_bind(), durable="snoop",
                                               stream="SCHEDULING")
        await sub.fetch(1, timeout=1)
    # The kube-bridge does read them.
    bridge = await secured_nats.connect("kube-bridge")
    sub = await bridge.js.pull_subscribe(subjects.sched_bind(), durable="kube-bridge-bind",
                                         stream="SCHEDULING")
    msgs = await sub.fetch(1, timeout=5)
    assert len(msgs) == 1
    await msgs[0].ack()


async def test_no_identity_reads_another_ones_replies(secured_nats: SecuredNats) -> None:
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    seed = secured_nats.credentials.seed_file("exporter")
    nc = await nats.connect(secured_nats.server.url, nkeys_seed=str(seed), error_cb=on_error,
                            inbox_prefix="_INBOX.exporter")
    try:
        await nc.subscribe("_INBOX.cli.>")
        await nc.flush()
        async def refused() -> bool:
            return any("permissions violation" in e.lower() for e in errors)

        await wait_for(refused, timeout=5, what="the server refusing the subscription")
    finally:
        await nc.close()
