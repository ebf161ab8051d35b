"""The elastic-job controller's exception tree.

:class:`ElasticJobError` is the root. :class:`JobSpecError` is permanent: the spec is wrong as
written (min > max, an unknown launcher, compute over 100 %), so a retry cannot help; it
names the field in the spec's own spelling (``spec.minReplicas``) and how to fix it, so the
CLI can print it as is and the controller can publish it as an error event.
:class:`TransitionError` is permanent too: an input the state machine has no rule for in the
job's current state (e.g. a scale command to a finished job).
"""

from __future__ import annotations

from alnair_common import AlnairError, PermanentError


class ElasticJobError(AlnairError):
    """Root of the elastic-job controller's own errors."""


class JobSpecError(ElasticJobError, PermanentError):
    """A TrainingJob spec that cannot run as written; ``field`` is its path in the spec."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TransitionError(ElasticJobError, PermanentError):
    """An input that the job's current state does not accept; the state is unchanged."""
