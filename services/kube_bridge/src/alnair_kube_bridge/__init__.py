"""Alnair kube-bridge: the Kubernetes adapter (pods, PodGroups, bindings, commands ↔ bus)."""

from ._dataset_crd import dataset_crd
from ._pods import is_alnair_pod, pod_workload
from ._service import KubeBridgeService
from ._settings import KubeBridgeSettings
from ._watch import Changed, ResourceWatch, Synced

__all__ = ["Changed", "KubeBridgeService", "KubeBridgeSettings", "ResourceWatch", "Synced",
           "dataset_crd", "is_alnair_pod", "pod_workload"]
