"""The adapters' check of a bind decision works under the server's permissions: each role
that carries decisions out (kube-bridge, local agent, device plugin) can read what the
scheduler committed in ``gpu_allocations``, and none of them can write a share there."""

from __future__ import annotations

import pytest

from alnair.v1 import common_pb2, scheduling_pb2
from alnair_common import BusUnavailableError
from alnair_common.allocations import UncommittedShareError, committed_shares
from alnair_common.testing.allocations import commit_share
from alnair_common.testing.bus_fixtures import SecuredNats

ADAPTERS = ["kube-bridge", "local-agent", "device-plugin"]


def decision(uid: str) -> scheduling_pb2.BindDecision:
    return scheduling_pb2.BindDecision(
        workload=common_pb2.WorkloadRef(uid=uid, name=uid, namespace="ml",
                                        mode=common_pb2.MODE_KUBERNETES),
        assignment=common_pb2.GpuAssignment(node="node-a", gpu_uuid="GPU-0", memory_gib=8,
                                            compute_percent=20))


@pytest.mark.parametrize("role", ADAPTERS)
async def test_each_adapter_reads_the_committed_share_and_cannot_commit_one(
        secured_nats: SecuredNats, role: str) -> None:
    scheduler = await secured_nats.connect("scheduler")
    real = decision("real")
    await commit_share(scheduler, real)
    adapter = await secured_nats.connect(role)
    reader = await committed_shares(adapter)
    share = await reader.check(real.workload, real.assignment)
    assert (share.workload.uid, share.memory_gib) == ("real", 8)
    forged = decision("forged")
    with pytest.raises(UncommittedShareError) as caught:
        await reader.check(forged.workload, forged.assignment)
    assert caught.value.reason == "not-committed"
    # Committing the forged share itself is not this role's to do: the server drops the
    # write, so the client never gets its answer, and the share is still not committed.
    with pytest.raises(BusUnavailableError):
        await commit_share(adapter, forged)
    with pytest.raises(UncommittedShareError):
        await reader.check(forged.workload, forged.assignment)
