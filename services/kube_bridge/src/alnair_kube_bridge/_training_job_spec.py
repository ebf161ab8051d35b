"""A TrainingJob object's spec → the JobSpec the elastic-job controller is sent.

kube-bridge may not import the controller (services never import each other), so the
mapping is written out here; the apiserver has already refused what the controller would
(the CRD is built from its limits), and the controller checks again. Defaults the controller
resolves itself are left unset (0, no restart policy), except where a partial restart policy
must be completed the way the controller completes a YAML file's (``maxBackoffSeconds`` at
least ``backoffSeconds``): a set policy is taken as written. A test compares the job the
controller builds from this JobSpec with the one it builds from the same document.
"""

from __future__ import annotations

from typing import Any

from alnair.v1 import common_pb2, job_pb2
from alnair_common import PermanentError

from ._custom_objects import object_key as job_key

GROUP, VERSION, PLURAL, KIND = "alnair.centaurus.io", "v1", "trainingjobs", "TrainingJob"
API_VERSION = f"{GROUP}/{VERSION}"
LAUNCHERS = {"torch-elastic": job_pb2.LAUNCHER_TORCH_ELASTIC, "torch": job_pb2.LAUNCHER_TORCH,
             "torch-inprocess": job_pb2.LAUNCHER_TORCH_INPROCESS}
# The controller's restart policy when a file sets only part of it (alnair_elastic_job).
DEFAULT_MAX_RESTARTS, DEFAULT_BACKOFF_SECONDS, DEFAULT_MAX_BACKOFF_SECONDS = 3, 10.0, 300.0
Obj = dict[str, Any]


def job_spec(obj: Obj) -> job_pb2.JobSpec:
    """The JobSpec of a TrainingJob object; PermanentError naming the field it cannot read."""
    namespace, name = job_key(obj)
    where = f"TrainingJob {namespace}/{name}"
    spec = obj.get("spec") or {}
    try:
        launcher = str(spec.get("launcher") or "torch-elastic")
        if launcher not in LAUNCHERS:
            raise PermanentError(f"{where}: spec.launcher {launcher!r} is not one of "
                                 f"{', '.join(LAUNCHERS)}")
        minimum = int(spec["minReplicas"])
        worker = spec.get("worker") or {}
        out = job_pb2.JobSpec(
            name=name, namespace=namespace, launcher=LAUNCHERS[launcher],
            min_replicas=minimum, max_replicas=int(spec.get("maxReplicas") or minimum),
            command=[str(c) for c in spec["command"]], image=str(spec.get("image") or ""),
            checkpoint_uri=str(spec.get("checkpoint") or ""),
            whole_gpus=int(worker.get("gpus") or 0),
        )
        if not out.whole_gpus:
            out.replica_request.CopyFrom(common_pb2.GpuRequest(
                memory_gib=int(worker.get("gpuMemoryGiB") or 0),
                compute_percent=int(worker.get("gpuComputePercent") or 0)))
        if "restartPolicy" in spec:
            policy = spec.get("restartPolicy") or {}
            backoff = float(policy.get("backoffSeconds", DEFAULT_BACKOFF_SECONDS))
            out.restart_policy.CopyFrom(job_pb2.RestartPolicy(
                max_restarts=int(policy.get("maxRestarts", DEFAULT_MAX_RESTARTS)),
                backoff_seconds=backoff,
                max_backoff_seconds=float(policy.get("maxBackoffSeconds",
                                                     max(DEFAULT_MAX_BACKOFF_SECONDS, backoff)))))
        deadlines = spec.get("deadlines") or {}
        out.deadlines.CopyFrom(job_pb2.JobDeadlines(  # 0: the controller's default (or none)
            scheduling_timeout_seconds=float(deadlines.get("schedulingTimeoutSeconds") or 0),
            rendezvous_timeout_seconds=float(deadlines.get("rendezvousTimeoutSeconds") or 0),
            active_deadline_seconds=float(deadlines.get("activeDeadlineSeconds") or 0)))
    except KeyError as e:
        raise PermanentError(f"{where}: spec.{e.args[0]} is missing") from e
    except (TypeError, ValueError) as e:
        raise PermanentError(f"{where}: the spec does not have the CRD's types: {e}") from e
    return out


def same_job(a: job_pb2.JobSpec, b: job_pb2.JobSpec) -> bool:
    """Whether two specs are one job: same name, what runs, how many, what each asks.

    A JobState names its job only by namespace/name; its spec tells this TrainingJob's job
    from another one of the same name (a CLI submission). Defaults the controller fills in
    (restart policy, deadlines) are not compared, so a controller whose defaults differ from
    this bridge's still matches.
    """
    def launcher(s: job_pb2.JobSpec) -> int:
        return s.launcher or job_pb2.LAUNCHER_TORCH_ELASTIC

    return ((a.namespace or "default", a.name, launcher(a), a.min_replicas, a.max_replicas,
             list(a.command), a.image, a.whole_gpus, a.checkpoint_uri)
            == (b.namespace or "default", b.name, launcher(b), b.min_replicas, b.max_replicas,
                list(b.command), b.image, b.whole_gpus, b.checkpoint_uri)
            and (a.whole_gpus or a.replica_request == b.replica_request))
