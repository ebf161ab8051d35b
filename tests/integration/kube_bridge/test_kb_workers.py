"""kube-bridge carries out training jobs' WorkerPlans against the real control plane and kwok,
holding only its RBAC rights (the training-jobs ClusterRole bound in the test's namespace):
worker pods, the gang's PodGroup, its rendezvous pod and Service; repeated, older and
after-restart plans change nothing; stop deletes exactly the planned pods; target 0 and a new
gang remove the old rendezvous; a failed pod is a worker exit; bad plans are refused with an
error event. kwok runs no containers, so rendezvous rounds are read from a stand-in for the
rendezvous pod's log (the seam ``RoundsRelay.read_log``); everything else is real."""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kb_support import stream_messages, workload_events
from kubernetes import client as k8s
from kubernetes import watch

from alnair.v1 import common_pb2, job_pb2, platform_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import Bus, subjects
from alnair_common.natsd import free_port
from alnair_common.testing import wait_for
from alnair_common.testing.kube import KubeNamespace
from alnair_common.testing.kwok import KwokNodes
from alnair_elastic_job import WorkerExited, job_key, worker_input
from alnair_kube_bridge._job_objects import (
    GENERATION_ANNOTATION,
    HOST_SCRIPT,
    gang_name,
    rendezvous_pod,
    worker_pod,
)
from alnair_kube_bridge._job_objects import (
    endpoint as gang_endpoint,
)
from alnair_kube_bridge._job_rounds import rounds_in
from alnair_kube_bridge._job_workers import JOBS_ROLE, job_selector
from alnair_lifecycle import RENDEZVOUS_LABEL, WORKER_ENV, worker_command, worker_env, worker_labels

J = job_pb2
GROUP, VERSION, PLURAL = "alnair.centaurus.io", "v1alpha1", "podgroups"
IMAGE = "ghcr.io/example/train:1"


def plan(namespace: str, generation: int, *, target: int, gang_min: int = 0, stop: tuple[str, ...] = (),
         incarnation: int = 1, phase: int = J.JOB_PHASE_SCHEDULING, image: str = IMAGE,
         name: str = "resnet", memory_gib: int = 8) -> J.WorkerPlan:
    spec = J.JobSpec(name=name, namespace=namespace, min_replicas=2, max_replicas=4, image=image,
                     replica_request=common_pb2.GpuRequest(memory_gib=memory_gib, compute_percent=30),
                     command=["python", "train.py"], launcher=J.LAUNCHER_TORCH_ELASTIC,
                     restart_policy=J.RestartPolicy(max_restarts=3),
                     deadlines=J.JobDeadlines(scheduling_timeout_seconds=120, rendezvous_timeout_seconds=60))
    return J.WorkerPlan(spec=spec, generation=generation, phase=phase, target=target, gang_min=gang_min,
                        stop=list(stop), rendezvous_id=f"{namespace}.{name}.{incarnation}")


async def send(bus: Bus, p: J.WorkerPlan, subject_name: str = "") -> None:
    await bus.publish(subjects.job_workers(subject_name or p.spec.name or "nameless"), p)


async def settled(bus: Bus) -> None:
    """Every plan published so far was carried out or refused (acked or terminated)."""
    async def probe() -> bool:
        info = await bus.js.consumer_info("COMMANDS", "kube-bridge-workers")
        return info.num_pending == 0 and info.num_ack_pending == 0
    await wait_for(probe, timeout=20, what="every worker plan settled")


def workers(kube: KubeNamespace, name: str = "resnet") -> list[k8s.V1Pod]:
    return kube.core.list_namespaced_pod(kube.namespace, label_selector=job_selector(name, kube.namespace)).items


async def wait_workers(kube: KubeNamespace, count: int, name: str = "resnet") -> list[k8s.V1Pod]:
    async def probe() -> tuple[list[k8s.V1Pod]] | None:
        found = workers(kube, name)
        return (found,) if len(found) == count else None
    return (await wait_for(probe, timeout=20, what=f"{count} worker pods"))[0]


def exists(call: Callable[[], object]) -> bool:
    try:
        call()
        return True
    except k8s.ApiException as e:
        if e.status == 404:
            return False
        raise


def gang_objects(kube: KubeNamespace, gang: str) -> tuple[bool, bool, bool]:
    ns, custom = kube.namespace, k8s.CustomObjectsApi(kube.api_client)
    return (exists(lambda: kube.core.read_namespaced_pod(gang, ns)),
            exists(lambda: kube.core.read_namespaced_service(gang, ns)),
            exists(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, gang)))


async def test_plans_create_workers_gang_and_rendezvous_then_stop_rescale_and_end(
        bus: Bus, kube: KubeNamespace, bridge_kubeconfig: Path, bind_jobs_role, start_bridge) -> None:
    bind_jobs_role()
    bridge = await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    first = plan(ns, 2, target=3, gang_min=2)
    gang = gang_name("resnet", first.rendezvous_id)
    await send(bus, first)
    pods = await wait_workers(kube, 3)

    await settled(bus)
    anchor = kube.core.read_namespaced_service("resnet-workers", ns)
    assert anchor.spec.cluster_ip == "None" and anchor.metadata.annotations[GENERATION_ANNOTATION] == "2"
    endpoint = f"{gang}.{ns}.svc:29400"
    for pod in pods:
        assert {**worker_labels(first), "alnair.centaurus.io/pod-group": gang}.items() <= pod.metadata.labels.items()
        assert pod.spec.scheduler_name == "alnair-scheduler" and pod.spec.restart_policy == "Never"
        assert pod.spec.subdomain == "resnet-workers"  # the workers' FQDNs resolve: torchrun's addresses
        [c] = pod.spec.containers
        assert c.image == IMAGE and c.command == worker_command(first, endpoint)
        assert {e.name: e.value for e in c.env} == {**WORKER_ENV, "ALNAIR_PROGRESS_FILE": "/alnair/progress/step"}
        [sidecar] = pod.spec.init_containers  # prints the progress file; ends with the worker
        assert sidecar.restart_policy == "Always" and sidecar.command[-1] == "/alnair/progress/step"
        assert c.resources.limits == {"alnair/vgpu-memory": "8", "alnair/vgpu-compute": "30"}
        [ref] = pod.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid) == ("Service", "resnet-workers", anchor.metadata.uid)
    host = kube.core.read_namespaced_pod(gang, ns)
    assert host.spec.scheduler_name == "default-scheduler" and host.spec.restart_policy == "Never"
    main, rounds = host.spec.containers
    assert main.image == rounds.image == IMAGE
    assert main.command == ["python3", "-c", HOST_SCRIPT.read_text(), "--run-id", first.rendezvous_id,
                            "--dir", "/tmp/rdzv", "--host", "0.0.0.0", "--port", "29400"]
    assert rounds.command[:3] == ["python3", "-u", "-c"] and rounds.command[-1] == "/tmp/rdzv/rounds.jsonl"
    service = kube.core.read_namespaced_service(gang, ns)
    assert [(p.port, p.target_port) for p in service.spec.ports] == [(29400, 29400)]
    assert service.spec.selector == {"ai.centaurus.io/training-job-gang": "resnet",
                                     "ai.centaurus.io/rendezvous-id": first.rendezvous_id}
    group = k8s.CustomObjectsApi(kube.api_client).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, gang)
    assert group["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 120}
    # They are Alnair's pods: their lifecycle reaches the controller, labelled with the job.
    async def pending() -> list[wl.WorkloadEvent]:
        return [e for e in await workload_events(bus) if e.workload.labels.get("ai.centaurus.io/training-job")]
    assert len(await wait_for(lambda: _at_least(pending, 3), timeout=20, what="3 pending worker events")) == 3

    # The same plan again, an older one, and after a restart of the bridge the same
    # generation again: nothing is created (the generation is on the workers Service).
    await send(bus, first)
    await send(bus, plan(ns, 1, target=4, gang_min=2))
    await settled(bus)
    await bridge.stop()
    bridge = await start_bridge(bridge_kubeconfig)
    await send(bus, plan(ns, 2, target=4, gang_min=2))
    await settled(bus)
    assert len(workers(kube)) == 3

    # stop deletes exactly the planned pod; the rest meet the target, nothing is created.
    uids = sorted(p.metadata.uid for p in pods)
    await send(bus, plan(ns, 3, target=2, stop=(uids[0], "not-a-worker"), phase=J.JOB_PHASE_SCALING))
    left = await wait_workers(kube, 2)
    assert sorted(p.metadata.uid for p in left) == uids[1:]
    assert gang_objects(kube, gang) == (True, True, True)

    # Recovering: every worker stopped, target 0: the gang's rendezvous and PodGroup go.
    await send(bus, plan(ns, 4, target=0, stop=tuple(uids[1:]), phase=J.JOB_PHASE_RECOVERING))
    await wait_workers(kube, 0)
    await wait_for(lambda: _async(gang_objects(kube, gang) == (False, False, False)), timeout=20,
                   what="the old gang's rendezvous pod, Service and PodGroup deleted")
    # A new gang meets in a new rendezvous, with objects of its own.
    second = plan(ns, 5, target=2, gang_min=2, incarnation=2)
    await send(bus, second)
    new_gang = gang_name("resnet", second.rendezvous_id)
    assert new_gang != gang
    for pod in await wait_workers(kube, 2):
        assert pod.metadata.labels["alnair.centaurus.io/pod-group"] == new_gang
        assert f"--rdzv-endpoint={new_gang}.{ns}.svc:29400" in pod.spec.containers[0].command
    assert gang_objects(kube, new_gang) == (True, True, True)

    # Deleted: every object of the job goes, the workers Service (its generation) too.
    survivors = tuple(p.metadata.uid for p in workers(kube))
    await send(bus, plan(ns, 6, target=0, stop=survivors, phase=J.JOB_PHASE_DELETING, incarnation=2))
    await send(bus, plan(ns, 7, target=0, phase=J.JOB_PHASE_DELETED, incarnation=2))
    await settled(bus)
    assert workers(kube) == [] and gang_objects(kube, new_gang) == (False, False, False)
    assert not exists(lambda: kube.core.read_namespaced_service("resnet-workers", ns))


async def test_a_plan_with_a_newer_one_waiting_creates_nothing(
        bus: Bus, kube: KubeNamespace, bridge_kubeconfig: Path, bind_jobs_role, start_bridge) -> None:
    """Plans queued while the bridge was away: gang 1's, then gang 2's. Gang 1's workers and
    rendezvous pod would only be deleted again by gang 2's plan: none is ever created (every
    pod the namespace ever got, read back from the apiserver's watch history)."""
    bind_jobs_role()
    ns = kube.namespace
    since = kube.core.list_namespaced_pod(ns).metadata.resource_version
    old, new = plan(ns, 2, target=2, gang_min=2), plan(ns, 3, target=2, gang_min=2, incarnation=2)
    await (await start_bridge(bridge_kubeconfig)).stop()  # its streams and consumer exist
    await send(bus, old)
    await send(bus, new)
    await start_bridge(bridge_kubeconfig)
    pods = await wait_workers(kube, 2)
    await settled(bus)
    assert {p.metadata.labels[RENDEZVOUS_LABEL] for p in pods} == {new.rendezvous_id}
    created = [e["object"].metadata for e in watch.Watch().stream(
        kube.core.list_namespaced_pod, ns, resource_version=since, timeout_seconds=2) if e["type"] == "ADDED"]
    assert sorted(m.name for m in created) == sorted(
        [p.metadata.name for p in pods] + [gang_name("resnet", new.rendezvous_id)])
    assert gang_objects(kube, gang_name("resnet", old.rendezvous_id)) == (False, False, False)
    anchor = kube.core.read_namespaced_service("resnet-workers", ns)
    assert anchor.metadata.annotations[GENERATION_ANNOTATION] == "3"


async def test_a_worker_that_fails_reaches_the_controller_as_a_worker_exit(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path, bind_jobs_role,
        start_bridge) -> None:
    bind_jobs_role()
    await start_bridge(bridge_kubeconfig)
    p = plan(kube.namespace, 1, target=1)  # a replacement: no gang, so no PodGroup
    await send(bus, p)
    [pod] = await wait_workers(kube, 1)
    assert "alnair.centaurus.io/pod-group" not in pod.metadata.labels
    assert gang_objects(kube, gang_name("resnet", p.rendezvous_id)) == (True, True, False)
    [node] = kwok_nodes(1, gpus_per_node=1, gpu_memory_gib=80)
    kwok_nodes.bind(kube.namespace, pod.metadata.name, node)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, kube.namespace, pod.metadata.name, "Running")
    kwok_nodes.finish(kube.namespace, pod.metadata.name, succeeded=False)

    async def failed() -> list[wl.WorkloadEvent]:
        return [e for e in await workload_events(bus) if e.workload.phase == wl.WORKLOAD_PHASE_FAILED]
    [event] = await wait_for(failed, timeout=30, what="the worker's failed event")
    assert worker_labels(p).items() <= event.workload.labels.items()
    found = worker_input(event)
    assert found is not None
    key, fact = found
    assert key == job_key(kube.namespace, "resnet")
    assert isinstance(fact, WorkerExited) and fact.worker == pod.metadata.uid and fact.code not in (0, None)


async def test_bad_plans_are_refused_with_an_error_event_and_the_bridge_goes_on(
        bus: Bus, kube: KubeNamespace, bridge_kubeconfig: Path, bind_jobs_role, start_bridge) -> None:
    bridge = await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    nameless = plan(ns, 1, target=1)
    nameless.spec.name = ""
    await send(bus, nameless, "nameless")
    await send(bus, plan(ns, 1, target=2, image="", name="no-image"))
    await send(bus, plan(ns, 1, target=2, memory_gib=0, name="no-memory"))
    await send(bus, plan(ns, 1, target=2, name="unbound"))  # the namespace grants no pods yet

    async def errors() -> list[platform_pb2.ErrorEvent]:
        found = await stream_messages(bus, "ERRORS", subjects.error("kube-bridge"), platform_pb2.ErrorEvent)
        return found if len(found) >= 4 else []
    found = {e.subject.rsplit(".", 1)[-1]: e.message for e in await wait_for(errors, timeout=20, what="4 errors")}
    assert "without spec.name" in found["nameless"]
    assert "has no spec.image" in found["no-image"] and "torchrun" in found["no-image"]
    assert "0 GiB" in found["no-memory"] and "gpuMemoryGiB" in found["no-memory"]
    unbound = found["unbound"]
    assert unbound.startswith(f"training job {ns}/unbound refused: namespace {ns} does not let kube-bridge "
                              "run training jobs (") and "Forbidden" in unbound
    # The exact command: the namespace, the ClusterRole, and the bridge's own ServiceAccount
    # (the test's, in the test namespace: taken from the apiserver's refusal, not assumed).
    fix = (f"kubectl -n {ns} create rolebinding alnair-training-jobs --clusterrole={JOBS_ROLE} "
           f"--serviceaccount={ns}:kube-bridge")
    assert unbound.endswith(f"bind ClusterRole {JOBS_ROLE} to kube-bridge in namespace {ns}: {fix}")
    assert workers(kube, "no-image") == [] and not bridge.task.done()

    # The operator runs the error's command as it stands (but for the ClusterRole's name: the
    # test plane holds this test's copy of it); the next plan goes through.
    argv = fix.split()[1:]
    kube.kubectl(*[f"--clusterrole={JOBS_ROLE}-{ns}" if a.startswith("--clusterrole=") else a for a in argv])
    await send(bus, plan(ns, 2, target=2, name="unbound"))
    await wait_workers(kube, 2, "unbound")


async def test_rendezvous_rounds_are_relayed_with_members_as_pod_uids(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path, bind_jobs_role,
        start_bridge) -> None:
    bind_jobs_role()
    bridge = await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    p = plan(ns, 1, target=2, gang_min=2)
    gang = gang_name("resnet", p.rendezvous_id)
    await send(bus, p)
    a, b = sorted(await wait_workers(kube, 2), key=lambda pod: pod.metadata.name)
    fqdn = f"{a.metadata.name}.resnet-workers.{ns}.svc.cluster.local"  # what torchrun reports
    lines = [{"round": 1, "members": [[fqdn, 40, 0], [b.metadata.name, 41, 0]]},
             {"round": 2, "members": [[fqdn, 40, 0], ["resnet-gone1", 42, 0]]},  # a pod since deleted
             {"round": 3, "members": [[b.metadata.name, 41, 0]]}]
    read: list[tuple[str, str, str]] = []

    def log(namespace: str, pod: str, container: str) -> str:
        read.append((namespace, pod, container))
        return "".join(json.dumps(x) + "\n" for x in lines) + '{"round": 4, "memb'  # one being written

    assert bridge.service.rounds is not None
    bridge.service.rounds.read_log = log
    [node] = kwok_nodes(1, gpus_per_node=1, gpu_memory_gib=80)
    kwok_nodes.bind(ns, gang, node)  # the rendezvous pod runs (as far as kwok goes)
    await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, gang, "Running")

    async def rounds() -> list[J.RendezvousRound]:
        found = await stream_messages(bus, "JOBS", subjects.job_rendezvous("resnet"), J.RendezvousRound)
        return found if len(found) >= 2 else []
    one, three = await wait_for(rounds, timeout=20, what="2 rounds relayed")
    assert (one.round, sorted(one.members)) == (1, sorted([a.metadata.uid, b.metadata.uid]))
    assert (three.round, list(three.members)) == (3, [b.metadata.uid])  # round 2 was superseded
    for r in (one, three):
        assert (r.name, r.namespace, r.rendezvous_id, r.source) == ("resnet", ns, p.rendezvous_id, "kube-bridge")
    assert read[0] == (ns, gang, "rounds")
    await wait_for(lambda: _async(len(read) > 3), timeout=10, what="the log read again")
    assert len(await stream_messages(bus, "JOBS", subjects.job_rendezvous("resnet"), J.RendezvousRound)) == 2


async def _async(value):  # type: ignore[no-untyped-def]
    return value


async def _at_least(probe, n: int):  # type: ignore[no-untyped-def]
    found = await probe()
    return found if len(found) >= n else None


# What a worker runs: a real torchrun trainer, or a torch-inprocess one (alnair_trainer).
GANG_COMMANDS = {
    J.LAUNCHER_TORCH_ELASTIC: "import torch.distributed as d; d.init_process_group('gloo'); d.barrier(); "
                              "d.destroy_process_group()",
    J.LAUNCHER_TORCH_INPROCESS: "import torch.distributed as d; from alnair_trainer import ElasticTrainer; "
                                "ElasticTrainer({}).run(lambda t: d.barrier(), steps=3)",
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("launcher", list(GANG_COMMANDS), ids=["torch-elastic", "torch-inprocess"])
def test_the_rendezvous_pods_commands_host_a_real_gang_and_print_its_rounds(tmp_path: Path, launcher: int) -> None:
    """What kwok cannot run: the rendezvous pod's two containers, as processes with the test's
    PyTorch (for python3), hosting two real workers as the worker pod starts them (its
    command and environment); the second container's output (the pod's log) holds the closed
    round, as the relay reads it."""
    p = plan("default", 1, target=2)
    p.spec.launcher = launcher
    p.spec.min_replicas = p.spec.max_replicas = 2
    p.spec.command[:] = [sys.executable, "-c", GANG_COMMANDS[launcher]]
    owner = {"apiVersion": "v1", "kind": "Service", "name": "x", "uid": "u", "controller": True}
    host, follower = rendezvous_pod(p, "default", "resnet", owned_by=owner)["spec"]["containers"]
    port, rdzv = free_port(), tmp_path / "rdzv"
    rdzv.mkdir()

    def local(argv: list[str]) -> list[str]:  # the pod's paths and port, here
        out = [sys.executable if a == "python3" else a.replace("/tmp/rdzv", str(rdzv)) for a in argv]
        return [str(port) if a == "29400" else a for a in out]

    in_pod = gang_endpoint(gang_name("resnet", p.rendezvous_id), "default")
    [container] = worker_pod(p, "default", "resnet", scheduler_name="alnair-scheduler", owned_by=owner,
                             pod_group=None)["spec"]["containers"]
    assert container["command"] == worker_command(p, in_pod)
    assert {e["name"]: e["value"] for e in container["env"]} == {
        **worker_env(p, in_pod), "ALNAIR_PROGRESS_FILE": "/alnair/progress/step"}
    if launcher == J.LAUNCHER_TORCH_INPROCESS:  # the trainer itself, told where to meet
        assert container["command"] == list(p.spec.command)
        assert worker_env(p, in_pod)["ALNAIR_RDZV_ENDPOINT"] == in_pod
    procs = [subprocess.Popen(local(host["command"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen(local(follower["command"]), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not (rdzv / "endpoint").exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, "the host did not start"
            time.sleep(0.2)
        here = f"127.0.0.1:{port}"
        argv = worker_command(p, here)
        if argv[0] == "torchrun":
            argv[0] = str(Path(sys.executable).with_name("torchrun"))
        env = {**os.environ, **worker_env(p, here), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        started = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for _ in range(2)]
        for w in started:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err[-2000:]
        stdout = procs[1].stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], 30)
        assert ready, "the follower printed no round"
        [(number, members)] = list(rounds_in(stdout.readline().decode()))
        assert number == 1 and [m[0] for m in members] == [socket.getfqdn()] * 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


async def test_the_workers_newest_step_reaches_the_controller(
        bus: Bus, kube: KubeNamespace, kwok_nodes: KwokNodes, bridge_kubeconfig: Path, bind_jobs_role,
        start_bridge) -> None:
    """Each running worker's progress sidecar log (a stand-in: kwok runs no containers) is read;
    the newest step of the job is published once, a newer one again, a pod not running never."""
    bind_jobs_role()
    bridge = await start_bridge(bridge_kubeconfig)
    ns = kube.namespace
    p = plan(ns, 1, target=2, gang_min=2)
    await send(bus, p)
    a, b = sorted(await wait_workers(kube, 2), key=lambda pod: pod.metadata.name)
    logs = {a.metadata.name: "3 0.25\n4 0.25\n", b.metadata.name: "4 0.2\n5 0.5\n6 0.5"}  # the last without its newline
    read: list[tuple[str, str, str]] = []

    def log(namespace: str, pod: str, container: str) -> str:
        read.append((namespace, pod, container))
        return logs[pod]

    steps: list[J.StepReport] = []

    async def on_step(_subject: str, r: J.StepReport) -> None:
        steps.append(r)
    await bus.subscribe(subjects.job_step("resnet"), J.StepReport, on_step)
    assert bridge.service.steps is not None
    bridge.service.steps.read_log = log
    await asyncio.sleep(2.5)
    assert steps == [] and read == [], "pods not running were read"
    [node] = kwok_nodes(1, gpus_per_node=2, gpu_memory_gib=80)
    for pod in (a, b):
        kwok_nodes.bind(ns, pod.metadata.name, node)
        await asyncio.to_thread(kwok_nodes.wait_for_phase, ns, pod.metadata.name, "Running")
    [first] = await wait_for(lambda: _async(list(steps)), timeout=20, what="a step report")
    assert (first.name, first.namespace, first.step, first.step_seconds) == ("resnet", ns, 6, 0.5)
    assert {pod for _, pod, c in read if c == "progress"} == {a.metadata.name, b.metadata.name}
    await asyncio.sleep(2.5)
    assert len(steps) == 1, "the same step was published twice"
    logs[a.metadata.name] += "9 0.3\n"
    await wait_for(lambda: _async(len(steps) == 2), timeout=20, what="the newer step")
    assert (steps[1].step, steps[1].step_seconds) == (9, 0.3)


@pytest.mark.timeout(60)
def test_the_progress_sidecar_prints_each_new_step_once(tmp_path: Path) -> None:
    """What kwok cannot run: the worker pod's progress sidecar, as a process."""
    owner = {"apiVersion": "v1", "kind": "Service", "name": "x", "uid": "u", "controller": True}
    pod = worker_pod(plan("default", 1, target=1), "default", "resnet", scheduler_name="alnair-scheduler",
                     owned_by=owner, pod_group=None)
    [sidecar] = pod["spec"]["initContainers"]
    progress = tmp_path / "step"
    argv = [sys.executable if a == "python3" else a for a in sidecar["command"][:-1]] + [str(progress)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        for step in (1, 1, 2):  # what the training script does: replace the file each step
            (tmp_path / "step.tmp").write_text(f"{step} 0.125\n")
            os.replace(tmp_path / "step.tmp", progress)
            time.sleep(1.2)
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert out.decode().splitlines() == ["1 0.125", "2 0.125"]
