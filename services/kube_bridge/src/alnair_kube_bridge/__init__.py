"""Alnair kube bridge."""

from ._service import KubeBridgeService

__all__ = ["KubeBridgeService"]
