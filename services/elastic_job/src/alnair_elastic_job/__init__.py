"""Alnair elastic-job: one TrainingJob spec for every launcher, one job state machine.

The public door: the CLI reads job files and renders states through these names, so the
controller, the CLI and the status agree on one spec and one state table (``TABLE``).
"""

from ._allocator import ElasticDemand, FreeCard, Hysteresis, ScalingCurve, allocate, fits
from ._controller import Controller, TrackedJob, WorkerActions, job_key, worker_actions
from ._crd import training_job_crd
from ._errors import ElasticJobError, JobSpecError, TransitionError
from ._job_codec import from_mapping, from_proto, from_yaml, to_proto
from ._job_spec import Deadlines, Launcher, RestartPolicy, TrainingJob, WorkerRequest
from ._job_states import (
    TABLE,
    CapacityChanged,
    DeleteCommand,
    JobInput,
    JobStatus,
    Phase,
    PhaseInfo,
    RendezvousComplete,
    ScaleCommand,
    StepReported,
    Tick,
    WorkerExited,
    WorkerRefused,
    WorkersPlaced,
    WorkerStarted,
    state_table_markdown,
    submitted,
    timeout_seconds,
)
from ._job_transitions import step
from ._service import ElasticJobService, ElasticJobSettings
from ._state_codec import Submit, command_from_proto, phase_from_proto, state_to_proto
from ._worker_events import (
    JOB_LABEL,
    JOB_NAMESPACE_LABEL,
    refusal_input,
    rendezvous_input,
    step_input,
    worker_input,
)

__all__ = [
    "CapacityChanged",
    "Controller",
    "Deadlines",
    "DeleteCommand",
    "ElasticDemand",
    "ElasticJobError",
    "ElasticJobService",
    "ElasticJobSettings",
    "FreeCard",
    "Hysteresis",
    "JOB_LABEL",
    "JOB_NAMESPACE_LABEL",
    "JobInput",
    "JobSpecError",
    "JobStatus",
    "Launcher",
    "Phase",
    "PhaseInfo",
    "RendezvousComplete",
    "RestartPolicy",
    "ScaleCommand",
    "ScalingCurve",
    "StepReported",
    "Submit",
    "TABLE",
    "Tick",
    "TrackedJob",
    "TrainingJob",
    "TransitionError",
    "WorkerActions",
    "WorkerExited",
    "WorkerRefused",
    "WorkerRequest",
    "WorkerStarted",
    "WorkersPlaced",
    "allocate",
    "command_from_proto",
    "fits",
    "from_mapping",
    "from_proto",
    "from_yaml",
    "job_key",
    "phase_from_proto",
    "refusal_input",
    "rendezvous_input",
    "state_table_markdown",
    "state_to_proto",
    "step",
    "step_input",
    "submitted",
    "timeout_seconds",
    "to_proto",
    "training_job_crd",
    "worker_actions",
    "worker_input",
]
