"""The ``v1beta1.DevicePlugin`` gRPC service for one resource: the protobuf edge.

Requests are turned into plain lists for :class:`Allocator`; its refusals become gRPC
statuses the kubelet logs and shows on the pod (INVALID_ARGUMENT for a malformed request,
FAILED_PRECONDITION when no scheduler assignment matches). An unexpected error becomes
INTERNAL with its text; the server keeps serving either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from alnair_common import get_logger
from alnair_kubelet.api import deviceplugin as dp
from alnair_kubelet.api import deviceplugin_grpc as dp_grpc

from . import _metrics
from ._allocator import Allocator, ContainerGrant
from ._device_state import DeviceState
from ._errors import InvalidDevicesError, NoAssignmentError
from ._units import Resource, all_units

log = get_logger("alnair.device-plugin")
T = TypeVar("T")
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


def device_list(resource: Resource, state_gpus: Any) -> dp.ListAndWatchResponse:
    return dp.ListAndWatchResponse(devices=[
        dp.Device(ID=device_id, health=HEALTHY if gpu.healthy else UNHEALTHY)
        for device_id, gpu in all_units(resource, state_gpus)
    ])


def grant_to_proto(grant: ContainerGrant) -> dp.ContainerAllocateResponse:
    return dp.ContainerAllocateResponse(
        envs=grant.envs,
        mounts=[dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in grant.mounts],
    )


class ResourcePlugin(dp_grpc.DevicePluginServicer):
    """Serves one extended resource (``alnair/vgpu-memory`` or ``alnair/vgpu-compute``)."""

    def __init__(self, resource: Resource, state: DeviceState, allocator: Allocator, *,
                 assignment_wait_seconds: float = 2.0) -> None:
        self.resource = resource
        self.state = state
        self.allocator = allocator
        # The kubelet may ask a moment before the bind decision reached us (the pod is bound
        # by kube-bridge in parallel): a missing assignment is retried this long before refusing.
        self.assignment_wait_seconds = assignment_wait_seconds

    async def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.aio.ServicerContext  # noqa: N802
                                     ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: dp.Empty, context: grpc.aio.ServicerContext  # noqa: N802
                           ) -> AsyncIterator[dp.ListAndWatchResponse]:
        version = 0
        while True:
            gpus, version = await self.state.newer_than(version)
            yield device_list(self.resource, gpus)

    async def GetPreferredAllocation(self, request: dp.PreferredAllocationRequest,  # noqa: N802
                                     context: grpc.aio.ServicerContext) -> dp.PreferredAllocationResponse:
        def decide() -> dp.PreferredAllocationResponse:
            return dp.PreferredAllocationResponse(container_responses=[
                dp.ContainerPreferredAllocationResponse(deviceIDs=self.allocator.preferred(
                    self.resource, list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size))
                for r in request.container_requests
            ])

        return await self._answer("GetPreferredAllocation", decide, context)

    async def Allocate(self, request: dp.AllocateRequest, context: grpc.aio.ServicerContext  # noqa: N802
                       ) -> dp.AllocateResponse:
        def decide() -> dp.AllocateResponse:
            grants = self.allocator.allocate(self.resource, [list(r.devices_ids) for r in request.container_requests])
            log.info("allocated", resource=self.resource.resource_name,
                     workloads=[g.workload_uid for g in grants], gpus=[g.envs["CUDA_VISIBLE_DEVICES"] for g in grants])
            return dp.AllocateResponse(container_responses=[grant_to_proto(g) for g in grants])

        return await self._answer("Allocate", decide, context)

    async def PreStartContainer(self, request: dp.PreStartContainerRequest,  # noqa: N802
                                context: grpc.aio.ServicerContext) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()

    async def _decide_waiting_for_assignment(self, decide: Callable[[], T]) -> T:
        deadline = asyncio.get_running_loop().time() + self.assignment_wait_seconds
        while True:
            try:
                return decide()
            except NoAssignmentError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
            await asyncio.sleep(0.05)

    async def _answer(self, method: str, decide: Callable[[], T], context: grpc.aio.ServicerContext) -> T:
        try:
            answer = await self._decide_waiting_for_assignment(decide)
            _metrics.REQUESTS.labels(self.resource.resource_name, method, "ok").inc()
            return answer
        except InvalidDevicesError as e:
            code, reason = grpc.StatusCode.INVALID_ARGUMENT, str(e)
        except NoAssignmentError as e:
            code, reason = grpc.StatusCode.FAILED_PRECONDITION, str(e)
        except Exception as e:  # noqa: BLE001 - the kubelet gets the reason, the plugin keeps serving
            log.exception("request failed", method=method, resource=self.resource.resource_name)
            code, reason = grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}"
        _metrics.REQUESTS.labels(self.resource.resource_name, method, code.name.lower().replace("_", "-")).inc()
        log.warning("request refused", method=method, resource=self.resource.resource_name,
                    code=code.name, reason=reason)
        await context.abort(code, reason)
        raise AssertionError("unreachable: abort raises")
