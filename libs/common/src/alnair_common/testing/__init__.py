"""Test harness shipped with Alnair: real servers on loopback for tests of any service.

pytest plugins: ``alnair_common.testing.bus_fixtures`` (nats-server with JetStream, a
connected :class:`~alnair_common.Bus`) and ``alnair_common.testing.testplane`` (Kubernetes
control plane, kwok, MongoDB-wire server, Prometheus, Redis).
"""

from .waiting import wait_for, wait_until

__all__ = ["wait_for", "wait_until"]
