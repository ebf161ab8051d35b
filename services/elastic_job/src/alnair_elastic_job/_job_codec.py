"""TrainingJob ↔ protobuf and ← a local YAML file: the edge where specs are checked.

The YAML file has the shape the CRD will have (``apiVersion``, ``kind``, ``metadata``,
``spec``), so one file works in both modes. Unknown fields are refused rather than ignored:
a misspelt ``maxReplica`` silently falling back to a default is the bug this prevents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alnair.v1 import common_pb2, job_pb2

from ._errors import JobSpecError
from ._job_spec import Deadlines, Launcher, RestartPolicy, TrainingJob, WorkerRequest, shown

API_VERSION = "alnair.centaurus.io/v1"
KIND = "TrainingJob"
_LAUNCHER_TO_PROTO = {Launcher.TORCH_ELASTIC: job_pb2.LAUNCHER_TORCH_ELASTIC,
                      Launcher.TORCH: job_pb2.LAUNCHER_TORCH,
                      Launcher.TORCH_INPROCESS: job_pb2.LAUNCHER_TORCH_INPROCESS}
_LAUNCHER_FROM_PROTO = {v: k for k, v in _LAUNCHER_TO_PROTO.items()}


def from_proto(spec: job_pb2.JobSpec) -> TrainingJob:
    """The job a JobSpec describes; JobSpecError naming the field when it cannot run."""
    if spec.launcher in _LAUNCHER_FROM_PROTO:
        launcher = _LAUNCHER_FROM_PROTO[spec.launcher]
    elif spec.launcher != job_pb2.LAUNCHER_UNSPECIFIED:
        raise JobSpecError("spec.launcher", f"launcher enum value {spec.launcher} is unknown to this "
                           "controller; use LAUNCHER_TORCH_ELASTIC, LAUNCHER_TORCH_INPROCESS or "
                           "LAUNCHER_TORCH")
    elif spec.framework:  # an older publisher: the string field before the enum
        launcher = Launcher.parse(spec.framework)
    else:
        launcher = Launcher.TORCH_ELASTIC
    rp, dl = spec.restart_policy, spec.deadlines
    return TrainingJob(
        name=spec.name, namespace=spec.namespace or "default", launcher=launcher,
        command=tuple(spec.command), image=spec.image,
        min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
        request=WorkerRequest(spec.replica_request.memory_gib, spec.replica_request.compute_percent,
                              spec.whole_gpus),
        checkpoint_uri=spec.checkpoint_uri,
        # Set, the policy is taken as written (0 s: restart at once); unset, the defaults.
        restart=RestartPolicy(rp.max_restarts, rp.backoff_seconds, rp.max_backoff_seconds)
        if spec.HasField("restart_policy") else RestartPolicy(),
        deadlines=Deadlines(dl.scheduling_timeout_seconds or Deadlines.scheduling_timeout_seconds,
                            dl.rendezvous_timeout_seconds or Deadlines.rendezvous_timeout_seconds,
                            dl.active_deadline_seconds),
    )


def to_proto(job: TrainingJob) -> job_pb2.JobSpec:
    """The JobSpec of a job, every default written out (a reader needs none of ours)."""
    return job_pb2.JobSpec(
        name=job.name, namespace=job.namespace, launcher=_LAUNCHER_TO_PROTO[job.launcher],
        min_replicas=job.min_replicas, max_replicas=job.max_replicas,
        replica_request=common_pb2.GpuRequest(memory_gib=job.request.memory_gib,
                                              compute_percent=job.request.compute_percent),
        whole_gpus=job.request.whole_gpus, command=list(job.command), image=job.image,
        checkpoint_uri=job.checkpoint_uri,
        restart_policy=job_pb2.RestartPolicy(max_restarts=job.restart.max_restarts,
                                             backoff_seconds=job.restart.backoff_seconds,
                                             max_backoff_seconds=job.restart.max_backoff_seconds),
        deadlines=job_pb2.JobDeadlines(
            scheduling_timeout_seconds=job.deadlines.scheduling_timeout_seconds,
            rendezvous_timeout_seconds=job.deadlines.rendezvous_timeout_seconds,
            active_deadline_seconds=job.deadlines.active_deadline_seconds),
    )


class _Fields:
    """Reads one mapping of the file, refusing unknown keys and wrong types by path."""

    def __init__(self, data: Any, path: str, known: tuple[str, ...]) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise JobSpecError(path, f"must be a mapping, got {type(data).__name__}")
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise JobSpecError(f"{path}.{unknown[0]}", f"unknown field; {path} takes "
                               f"{', '.join(known)}")
        self.data, self.path = data, path

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = self.data.get(key)
        if value is None:  # absent, or `key:` with nothing after it
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise JobSpecError(f"{self.path}.{key}", f"must be {_kind_name(kinds)}, got {shown(value)}")
        return value


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {int: "a whole number", float: "a number", str: "a string", list: "a list",
             dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


_NUMBER = (int, float)


def from_mapping(doc: Any) -> TrainingJob:
    """The job a parsed TrainingJob document describes (the YAML file or, later, the CRD)."""
    top = _Fields(doc, "TrainingJob", ("apiVersion", "kind", "metadata", "spec"))
    api, kind = top.get("apiVersion", str, API_VERSION), top.get("kind", str, KIND)
    if api != API_VERSION:
        raise JobSpecError("apiVersion", f"is {shown(api)}; this controller reads {API_VERSION}")
    if kind != KIND:
        raise JobSpecError("kind", f"is {shown(kind)}; expected {KIND}")
    meta = _Fields(top.get("metadata", dict, None), "metadata", ("name", "namespace"))
    spec = _Fields(top.get("spec", dict, None), "spec",
                   ("launcher", "image", "command", "minReplicas", "maxReplicas", "worker",
                    "checkpoint", "restartPolicy", "deadlines"))
    worker = _Fields(spec.get("worker", dict, None), "spec.worker",
                     ("gpuMemoryGiB", "gpuComputePercent", "gpus"))
    restart = _Fields(spec.get("restartPolicy", dict, None), "spec.restartPolicy",
                      ("maxRestarts", "backoffSeconds", "maxBackoffSeconds"))
    dl = _Fields(spec.get("deadlines", dict, None), "spec.deadlines",
                 ("schedulingTimeoutSeconds", "rendezvousTimeoutSeconds", "activeDeadlineSeconds"))
    # First: a horovod job should hear why horovod is refused, not that a field is missing.
    launcher = Launcher.parse(spec.get("launcher", str, Launcher.TORCH_ELASTIC.value))
    command = spec.get("command", (list, str), None)
    if command is None:
        raise JobSpecError("spec.command", "is missing; give the training command, e.g. "
                           "[python, train.py]")
    if isinstance(command, str):
        command = [command]
    if not all(isinstance(c, str) for c in command):
        raise JobSpecError("spec.command", f"must be a list of strings, got {shown(command)}")
    if "minReplicas" not in spec.data:
        raise JobSpecError("spec.minReplicas", "is missing; the job starts once this many workers "
                           "are placed")
    minimum = spec.get("minReplicas", int, 1)
    maximum = spec.get("maxReplicas", int, minimum)
    backoff = restart.get("backoffSeconds", _NUMBER, RestartPolicy.backoff_seconds)
    name = meta.get("name", str, None)
    if name is None:
        raise JobSpecError("metadata.name", "is missing; name the job (a DNS-1123 label)")
    return TrainingJob(
        name=name, namespace=meta.get("namespace", str, "default"),
        launcher=launcher,
        image=spec.get("image", str, ""), command=tuple(command),
        min_replicas=minimum, max_replicas=maximum,
        request=WorkerRequest(worker.get("gpuMemoryGiB", int, 0),
                              worker.get("gpuComputePercent", int, 0), worker.get("gpus", int, 0)),
        checkpoint_uri=spec.get("checkpoint", str, ""),
        restart=RestartPolicy(restart.get("maxRestarts", int, RestartPolicy.max_restarts), backoff,
                              restart.get("maxBackoffSeconds", _NUMBER,
                                          max(RestartPolicy.max_backoff_seconds, backoff))),
        deadlines=Deadlines(
            dl.get("schedulingTimeoutSeconds", _NUMBER, Deadlines.scheduling_timeout_seconds),
            dl.get("rendezvousTimeoutSeconds", _NUMBER, Deadlines.rendezvous_timeout_seconds),
            dl.get("activeDeadlineSeconds", _NUMBER, 0.0)),
    )


def from_yaml(text: str, source: str = "<TrainingJob>") -> TrainingJob:
    """The job of a local YAML file's text (``alnair job submit FILE``).

    PyYAML is imported here, not at module load: the controller's image never parses YAML,
    only the CLI side does, and PyYAML is in the development environment through
    alnair-common[testing].
    """
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise JobSpecError(source, "reading a TrainingJob file needs PyYAML; pip install pyyaml") from e
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        # ValueError: an integer of over 4,300 digits; RecursionError: nesting too deep
        raise JobSpecError(source, f"is not valid YAML: {str(e)[:300]}") from e
    return from_mapping(doc)
