"""Commands to kube-bridge (annotate, record event, status update) and PodGroup events,
against the real control plane, with the bridge holding only its RBAC rights."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kb_support import alnair_pod, stream_messages
from kubernetes import client as k8s

from alnair.v1 import commands_pb2
from alnair_common import Bus, subjects
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace

GROUP, VERSION, PLURAL = "alnair.centaurus.io", "v1alpha1", "podgroups"


async def results(bus: Bus) -> dict[str, commands_pb2.CommandResult]:
    found = await stream_messages(bus, "COMMANDS", subjects.cmd_result(),
                                  commands_pb2.CommandResult)
    return {r.command_id: r for r in found}


async def result_of(bus: Bus, command_id: str) -> commands_pb2.CommandResult:
    async def probe():
        return (await results(bus)).get(command_id)

    return await wait_for(probe, timeout=20, what=f"result of {command_id}")


async def podgroup_events(bus: Bus) -> list[commands_pb2.PodGroup]:
    return await stream_messages(bus, "WORKLOADS", subjects.podgroup_events(),
                                 commands_pb2.PodGroup)


def ref(kube: KubeNamespace, kind: str, name: str) -> commands_pb2.ObjectRef:
    api_version = "v1" if kind == "Pod" else f"{GROUP}/{VERSION}"
    return commands_pb2.ObjectRef(api_version=api_version, kind=kind, namespace=kube.namespace,
                                  name=name)


async def test_annotate_event_and_bad_commands(bus: Bus, kube: KubeNamespace, start_bridge,
                                               bridge_kubeconfig: Path) -> None:
    bridge = await start_bridge(bridge_kubeconfig)
    kube.core.create_namespaced_pod(kube.namespace, alnair_pod("w"))
    pod = ref(kube, "Pod", "w")

    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="a1", object=pod, annotations={"ai.centaurus.io/util-max": "0.7"}))
    assert (await result_of(bus, "a1")).ok
    annotations = kube.core.read_namespaced_pod("w", kube.namespace).metadata.annotations
    assert annotations["ai.centaurus.io/util-max"] == "0.7"
    # An empty value removes the annotation.
    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="a2", object=pod, annotations={"ai.centaurus.io/util-max": ""}))
    assert (await result_of(bus, "a2")).ok
    annotations = kube.core.read_namespaced_pod("w", kube.namespace).metadata.annotations or {}
    assert "ai.centaurus.io/util-max" not in annotations

    # Outside ai.centaurus.io/: refused, nothing written.
    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="bad-key", object=pod, annotations={"example.com/x": "1"}))
    bad = await result_of(bus, "bad-key")
    assert not bad.ok and bad.permanent and "ai.centaurus.io/" in bad.reason

    # A missing pod: the API's reason comes back, the bridge keeps running.
    await bus.publish(subjects.cmd_annotate(), commands_pb2.AnnotateCommand(
        command_id="missing", object=ref(kube, "Pod", "nope"),
        annotations={"ai.centaurus.io/x": "1"}))
    missing = await result_of(bus, "missing")
    assert not missing.ok and missing.permanent and "NotFound" in missing.reason

    for attempt in range(2):  # the second is a replay of the same command: one Event only
        await bus.publish(subjects.cmd_event(), commands_pb2.RecordEventCommand(
            command_id="e1", object=pod, type="Warning", reason="FailedScheduling",
            message="no card with 40 GiB free: gpu0 has 32"), msg_id=f"e1-{attempt}")
    assert (await result_of(bus, "e1")).ok

    async def recorded():
        events = kube.core.list_namespaced_event(kube.namespace).items
        return [e for e in events if e.reason == "FailedScheduling"]

    [event] = await wait_for(recorded, timeout=10, what="Kubernetes Event")
    assert event.involved_object.name == "w" and event.type == "Warning"
    assert "40 GiB" in event.message

    await bus.publish(subjects.cmd_event(), commands_pb2.RecordEventCommand(
        command_id="e-bad", object=pod, type="Loud", reason="X"))
    assert not (await result_of(bus, "e-bad")).ok
    assert not bridge.task.done()


async def test_podgroup_events_and_status_updates(bus: Bus, kube: KubeNamespace, start_bridge,
                                                  bridge_kubeconfig: Path) -> None:
    await start_bridge(bridge_kubeconfig)
    custom = k8s.CustomObjectsApi(kube.api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
        "metadata": {"name": "gang"}, "spec": {"minMember": 3}})

    async def first():
        return await podgroup_events(bus)

    [created] = await wait_for(first, timeout=20, what="podgroup event")
    assert (created.ref.name, created.min_member, created.schedule_timeout_seconds) == \
        ("gang", 3, 300)
    assert not created.deleted

    group = ref(kube, "PodGroup", "gang")
    await bus.publish(subjects.cmd_status(), commands_pb2.StatusUpdateCommand(
        command_id="s1", object=group, status_json=json.dumps({"phase": "Scheduling",
                                                               "scheduled": 2})))
    assert (await result_of(bus, "s1")).ok
    status = custom.get_namespaced_custom_object(GROUP, VERSION, kube.namespace, PLURAL,
                                                 "gang")["status"]
    assert status == {"phase": "Scheduling", "scheduled": 2}

    async def scheduling():
        events = await podgroup_events(bus)
        return events if events[-1].phase == "Scheduling" else None

    events = await wait_for(scheduling, timeout=20, what="podgroup status event")
    assert events[-1].scheduled == 2

    # The CRD's validation speaks through the result.
    await bus.publish(subjects.cmd_status(), commands_pb2.StatusUpdateCommand(
        command_id="s-bad", object=group, status_json='{"phase": "Bogus"}'))
    invalid = await result_of(bus, "s-bad")
    assert not invalid.ok and invalid.permanent and "Invalid" in invalid.reason
    await bus.publish(subjects.cmd_status(), commands_pb2.StatusUpdateCommand(
        command_id="s-json", object=group, status_json="[1]"))
    assert "JSON object" in (await result_of(bus, "s-json")).reason

    await asyncio.to_thread(custom.delete_namespaced_custom_object, GROUP, VERSION,
                            kube.namespace, PLURAL, "gang")

    async def deleted():
        events = await podgroup_events(bus)
        return events if events[-1].deleted else None

    events = await wait_for(deleted, timeout=20, what="podgroup deleted event")
    assert [e.deleted for e in events].count(True) == 1
