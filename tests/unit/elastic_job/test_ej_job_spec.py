"""TrainingJob at the edge: a YAML file, a JobSpec message; every bad spec names its field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alnair.v1 import common_pb2, job_pb2
from alnair_common import PermanentError
from alnair_elastic_job import (
    JobSpecError,
    Launcher,
    RestartPolicy,
    TrainingJob,
    WorkerRequest,
    from_mapping,
    from_proto,
    from_yaml,
    to_proto,
)

GOOD = """
apiVersion: alnair.centaurus.io/v1
kind: TrainingJob
metadata: {name: resnet, namespace: team-a}
spec:
  launcher: torch-elastic
  image: ghcr.io/example/train:1
  command: [python, train.py, --epochs, "3"]
  minReplicas: 2
  maxReplicas: 4
  worker: {gpuMemoryGiB: 8, gpuComputePercent: 30}
  checkpoint: /ckpt/resnet
  restartPolicy: {maxRestarts: 5, backoffSeconds: 2, maxBackoffSeconds: 60}
  deadlines: {schedulingTimeoutSeconds: 120, rendezvousTimeoutSeconds: 30, activeDeadlineSeconds: 3600}
"""


def doc(**spec: object) -> dict:
    base: dict = {"command": ["python", "train.py"], "minReplicas": 1, "maxReplicas": 2,
                  "worker": {"gpus": 1}}
    base.update(spec)
    return {"metadata": {"name": "job"}, "spec": {k: v for k, v in base.items() if v is not None}}


def test_a_full_file_reads_into_the_job_it_describes() -> None:
    job = from_yaml(GOOD)
    assert job == TrainingJob(
        name="resnet", namespace="team-a", launcher=Launcher.TORCH_ELASTIC,
        image="ghcr.io/example/train:1", command=("python", "train.py", "--epochs", "3"),
        min_replicas=2, max_replicas=4, request=WorkerRequest(8, 30), checkpoint_uri="/ckpt/resnet",
        restart=RestartPolicy(5, 2.0, 60.0),
        deadlines=job.deadlines)
    assert (job.deadlines.scheduling_timeout_seconds, job.deadlines.rendezvous_timeout_seconds,
            job.deadlines.active_deadline_seconds) == (120.0, 30.0, 3600.0)
    assert job.elastic and job.request.gpus == pytest.approx(0.3)


def test_a_minimal_file_gets_the_documented_defaults() -> None:
    job = from_mapping(doc(maxReplicas=None))
    assert job.max_replicas == job.min_replicas == 1 and job.namespace == "default"
    assert job.launcher is Launcher.TORCH_ELASTIC and job.restart == RestartPolicy()
    assert job.deadlines.rendezvous_timeout_seconds == 60.0 and not job.elastic


def test_the_proto_round_trip_keeps_every_field() -> None:
    job = from_yaml(GOOD)
    assert from_proto(to_proto(job)) == job
    whole = from_mapping(doc(worker={"gpus": 2}, launcher="torch", maxReplicas=1))
    assert from_proto(job_pb2.JobSpec.FromString(to_proto(whole).SerializeToString())) == whole


def test_an_older_publisher_with_the_framework_string_still_reads() -> None:
    old = job_pb2.JobSpec(name="old", framework="pytorch-elastic", min_replicas=1, max_replicas=3,
                          replica_request=common_pb2.GpuRequest(memory_gib=4, compute_percent=50),
                          command=["python", "t.py"])
    job = from_proto(old)
    assert job.launcher is Launcher.TORCH_ELASTIC and job.restart == RestartPolicy()
    with pytest.raises(JobSpecError, match="Horovod is unmaintained"):
        from_proto(job_pb2.JobSpec(name="h", framework="horovod", min_replicas=1, max_replicas=1))


def test_horovod_is_refused_saying_why_and_what_to_use() -> None:
    with pytest.raises(JobSpecError) as e:
        from_mapping({"spec": {"launcher": "horovod"}})
    assert e.value.field == "spec.launcher"
    for words in ("unmaintained", "current PyTorch", "torch-elastic", "launcher: torch"):
        assert words in str(e.value)
    assert isinstance(e.value, PermanentError)


@pytest.mark.parametrize(("spec", "field", "hint"), [
    (doc(minReplicas=3, maxReplicas=2), "spec.minReplicas", "minReplicas <= maxReplicas"),
    (doc(minReplicas=0), "spec.minReplicas", "at least one worker"),
    (doc(maxReplicas=0, minReplicas=0), "spec.minReplicas", "1..1024"),
    (doc(maxReplicas=5000), "spec.maxReplicas", "1..1024"),
    (doc(minReplicas=None), "spec.minReplicas", "is missing"),
    (doc(launcher="mpi"), "spec.launcher", "torch-elastic"),
    (doc(launcher="torch", maxReplicas=3), "spec.launcher", "fixed world size"),
    (doc(worker={"gpuMemoryGiB": 8, "gpuComputePercent": 250}), "spec.worker.gpuComputePercent",
     "100 %"),
    (doc(worker={"gpuMemoryGiB": 0, "gpuComputePercent": 20}), "spec.worker.gpuMemoryGiB", "1 GiB"),
    (doc(worker={}), "spec.worker", "asks for no GPU"),
    (doc(worker={"gpus": 1, "gpuMemoryGiB": 8}), "spec.worker", "not both"),
    (doc(worker={"gpus": 100}), "spec.worker.gpus", "1..64"),
    (doc(worker={"gpu": 1}), "spec.worker.gpu", "unknown field"),
    (doc(maxReplica=4), "spec.maxReplica", "unknown field"),
    (doc(minReplicas="2"), "spec.minReplicas", "a whole number"),
    (doc(minReplicas=True), "spec.minReplicas", "a whole number"),
    (doc(command=[]), "spec.command", "is empty"),
    (doc(command=None), "spec.command", "is missing"),
    (doc(command=["python", 3]), "spec.command", "list of strings"),
    (doc(restartPolicy={"maxRestarts": -1}), "spec.restartPolicy.maxRestarts", "0..1000"),
    (doc(restartPolicy={"backoffSeconds": 30, "maxBackoffSeconds": 5}),
     "spec.restartPolicy.maxBackoffSeconds", "less than backoffSeconds"),
    (doc(deadlines={"schedulingTimeoutSeconds": 0}), "spec.deadlines.schedulingTimeoutSeconds",
     "more than 0"),
    (doc(deadlines={"activeDeadlineSeconds": float("inf")}), "spec.deadlines.activeDeadlineSeconds",
     "number of seconds"),
    ({"metadata": {"name": "Bad_Name"}, "spec": doc()["spec"]}, "metadata.name", "DNS-1123"),
    ({"spec": doc()["spec"]}, "metadata.name", "is missing"),
    ({"apiVersion": "v1", **doc()}, "apiVersion", "alnair.centaurus.io/v1"),
    ({"kind": "Job", **doc()}, "kind", "TrainingJob"),
    ({**doc(), "status": {}}, "TrainingJob.status", "unknown field"),
    ([1, 2], "TrainingJob", "mapping"),
])
def test_a_bad_spec_names_the_field_and_the_fix(spec: object, field: str, hint: str) -> None:
    with pytest.raises(JobSpecError) as e:
        from_mapping(spec)
    assert e.value.field == field
    assert hint in str(e.value) and str(e.value).startswith(field)


def test_bad_yaml_is_a_spec_error_naming_the_file() -> None:
    with pytest.raises(JobSpecError, match=r"^job.yaml: is not valid YAML"):
        from_yaml("spec: [unclosed", source="job.yaml")


def test_an_unknown_launcher_enum_value_is_refused() -> None:
    spec = to_proto(from_mapping(doc()))
    spec.launcher = 7  # type: ignore[assignment]
    with pytest.raises(JobSpecError, match="enum value 7"):
        from_proto(spec)


def test_backoff_doubles_up_to_its_cap() -> None:
    p = RestartPolicy(3, 2.0, 10.0)
    assert [p.backoff(n) for n in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert p.backoff(10_000) == 10.0


@given(st.dictionaries(st.sampled_from(["command", "minReplicas", "maxReplicas", "worker", "launcher",
                                        "image", "checkpoint", "restartPolicy", "deadlines", "bogus"]),
                       st.one_of(st.none(), st.integers(-5, 2000), st.text(max_size=5),
                                 st.lists(st.text(max_size=3), max_size=3), st.floats(),
                                 st.dictionaries(st.text(max_size=12), st.integers(-1, 300),
                                                 max_size=3))))
def test_any_document_either_reads_or_is_a_spec_error(spec: dict) -> None:
    """No crash other than JobSpecError, and whatever reads survives the proto round trip."""
    try:
        job = from_mapping({"metadata": {"name": "fuzz"}, "spec": spec})
    except JobSpecError as e:
        assert e.field and str(e).startswith(e.field)
        return
    assert 1 <= job.min_replicas <= job.max_replicas
    assert from_proto(to_proto(job)) == job


HUGE = 10 ** 400


@pytest.mark.parametrize("spec", [
    doc(minReplicas=HUGE), doc(maxReplicas=-HUGE), doc(worker={"gpuMemoryGiB": HUGE, "gpuComputePercent": 10}),
    doc(restartPolicy={"backoffSeconds": HUGE}), doc(restartPolicy={"maxRestarts": HUGE}),
    doc(deadlines={"schedulingTimeoutSeconds": -HUGE}), doc(deadlines={"activeDeadlineSeconds": HUGE}),
])
def test_a_number_too_large_for_any_field_is_a_spec_error_saying_so(spec: dict) -> None:
    """Integers beyond a float (OverflowError) or beyond 4,300 digits (ValueError when
    printed) are refused like any value out of range, by field."""
    with pytest.raises(JobSpecError) as e:
        from_mapping(spec)
    assert e.value.field.startswith("spec.") and "1329 bits" in str(e.value), str(e.value)


@pytest.mark.timeout(20)
def test_a_yaml_alias_bomb_deep_nesting_or_a_5000_digit_number_is_refused_quickly() -> None:
    levels = ", ".join(f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9))
    bomb = f"metadata: {{name: b}}\nspec:\n  command: [&l0 [x, x, x, x, x, x, x, x, x, x], {levels}, *l8]\n"
    with pytest.raises(JobSpecError, match=r"^spec.command: must be a list of strings, got \[\["):
        from_yaml(bomb)  # its repr alone would be 10^8 strings
    with pytest.raises(JobSpecError, match="is not valid YAML"):
        from_yaml("metadata: {name: b}\nspec:\n  minReplicas: 1" + "0" * 5000 + "\n")
    with pytest.raises(JobSpecError, match="is not valid YAML"):
        from_yaml("spec:\n  command: " + "[" * 100_000 + "]" * 100_000 + "\n")
