"""Alnair local agent: runs local workloads and training jobs' workers on shared GPUs (local
mode's adapter)."""

from ._job_files import JobFiles
from ._launcher import cuda_share, workload_env
from ._service import LocalAgentService
from ._settings import LocalAgentSettings
from ._submission import Submission
from ._workspace import Workspace

__all__ = ["JobFiles", "LocalAgentService", "LocalAgentSettings", "Submission", "Workspace",
           "cuda_share", "workload_env"]
