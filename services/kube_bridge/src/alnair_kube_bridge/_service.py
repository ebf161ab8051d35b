"""The kube bridge service."""

from __future__ import annotations

from alnair_common import Service


class KubeBridgeService(Service):
    name = "kube-bridge"
    role = "skeleton: connected and healthy; watches no Kubernetes objects yet (adapters issue #6)"
