"""The root of the profiler's exception tree.

Everything the profiler raises on purpose derives from :class:`ProfilerError`, itself an
:class:`alnair_common.AlnairError`, and is either temporary or permanent, which is what its
callers decide on:

* ``StoreUnavailableError`` (``_store``), temporary: the document store did not answer; the
  writer keeps the record and tries again.
* ``PrometheusError`` (``_prometheus``), temporary: Prometheus did not answer or rejected a
  query; the profile is written from the bus samples only.
* ``InvalidInputError`` (``_domain``), permanent: a bus message the profiler cannot use; the
  durable consumer terminates it and publishes why.

Each is defined next to the code that raises it.
"""

from __future__ import annotations

from alnair_common import AlnairError


class ProfilerError(AlnairError):
    """Root of every error raised by alnair_profiler."""
