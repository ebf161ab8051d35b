"""The kernel-name evidence end to end: CudaSamples on the bus (as the exporter relays the
interceptor's region) → the profiler → the MongoDB record. Two workloads whose launch
signatures repeat alike (one kernel sequence every 12.3 ms): the one that launched
training-named kernels is training, the PyTorch one that launched none is not — which the
signature alone would have called training."""

from __future__ import annotations

from datetime import timedelta

from prof_support import T0, P, event, events_settled, running, ts
from test_prof_records import _profile_settings, _record

from alnair.v1 import common_pb2, metrics_pb2
from alnair_common import subjects
from alnair_common.testing import wait_for

WORKLOADS = (("uid-infer", 0), ("uid-train", 300))  # training-named launches per second


async def test_the_record_says_what_the_kernel_names_say(nats_server, bus, mongo, tmp_path) -> None:
    async with running(_profile_settings(nats_server, mongo, tmp_path)):
        for uid, _ in WORKLOADS:
            await bus.publish(subjects.workload_events(), event(uid, uid, P.WORKLOAD_PHASE_RUNNING, 1))
        await events_settled(bus)
        for uid, training in WORKLOADS:
            for k in range(12):
                sample = metrics_pb2.CudaSample(
                    workload=common_pb2.WorkloadRef(uid=uid), node="node-1", gpu_uuid="GPU-1",
                    sampled_at=ts(T0 + timedelta(seconds=k)), kernel_launches_total=1000 * k,
                    launch_period_seconds=0.0123 if k > 1 else 0.0, launch_period_repeats=80 * k,
                    training_kernel_launches_total=training * k, kernel_names_read=True, torch_kernels_seen=True)
                await bus.publish(subjects.cuda_metrics("node-1", uid), sample)
        await bus.nc.flush()
        for uid, _ in WORKLOADS:
            await bus.publish(subjects.workload_events(), event(uid, uid, P.WORKLOAD_PHASE_SUCCEEDED, 2, end=12.0))
        infer = await wait_for(lambda: _record(mongo, "uid-infer"), what="the inference workload's record")
        train = await wait_for(lambda: _record(mongo, "uid-train"), what="the training workload's record")
    assert infer["training"]["evidence"] == "kernel-names" and not infer["training"]["is_training"], infer["training"]
    assert train["training"]["evidence"] == "kernel-names" and train["training"]["is_training"], train["training"]
    assert abs(train["training"]["period_seconds"] - 0.0123) < 1e-9  # the signature's period, kept
