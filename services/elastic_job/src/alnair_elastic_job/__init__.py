"""Alnair elastic-job: one TrainingJob spec for every launcher, one job state machine.

The public door: the CLI reads job files and renders states through these names, so the
controller, the CLI and the status agree on one spec and one state table.
"""

from ._errors import ElasticJobError, JobSpecError, TransitionError
from ._job_codec import from_mapping, from_proto, from_yaml, to_proto
from ._job_spec import Deadlines, Launcher, RestartPolicy, TrainingJob, WorkerRequest
from ._service import ElasticJobService

__all__ = [
    "Deadlines",
    "ElasticJobError",
    "ElasticJobService",
    "JobSpecError",
    "Launcher",
    "RestartPolicy",
    "TrainingJob",
    "TransitionError",
    "WorkerRequest",
    "from_mapping",
    "from_proto",
    "from_yaml",
    "to_proto",
]
