"""The calls kube-bridge makes on one kind of Alnair's namespaced custom objects (TrainingJob,
Dataset): read, hold and release with a finalizer, write the status subresource.

Every write names the object's resourceVersion as its precondition, so a write decided from
an object that has changed since is refused (409) instead of undoing the change; whether
that refusal is news is the caller's to say (``conflict_is_temporary``: retried by the
caller's redelivery, else left to the object's next watch event, which follows).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from ._kube_errors import MERGE_PATCH, api_json

Obj = dict[str, Any]


def object_key(obj: Obj) -> tuple[str, str]:
    """(namespace, name) of an object as the watch delivers it."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "default", meta.get("name") or ""


class CustomObjects:
    def __init__(self, api_client: k8s.ApiClient, group: str, version: str, plural: str,
                 kind: str, namespace: str = "") -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespace = namespace

    def _where(self, obj: Obj) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta["namespace"], meta["name"]

    def get(self, namespace: str, name: str) -> Obj | None:
        return api_json(f"read {self.kind} {namespace}/{name}",
                        lambda: self.custom.get_namespaced_custom_object(
                            self.group, self.version, namespace, self.plural, name,
                            _preload_content=False), absent=(404,))

    def named(self, name: str) -> list[Obj]:
        """Every object called ``name`` (in the watched namespace, or in any)."""
        selector = f"metadata.name={name}"
        if self.namespace:
            call = lambda: self.custom.list_namespaced_custom_object(  # noqa: E731
                self.group, self.version, self.namespace, self.plural, field_selector=selector,
                _preload_content=False)
        else:
            call = lambda: self.custom.list_cluster_custom_object(  # noqa: E731
                self.group, self.version, self.plural, field_selector=selector,
                _preload_content=False)
        return list((api_json(f"list {self.kind}s named {name}", call) or {}).get("items") or [])

    def hold(self, obj: Obj, finalizer: str) -> Obj | None:
        """Add ``finalizer`` (to the object as it is now), or None: the object changed since
        (its newer event follows) or is gone (its DELETED event follows)."""
        meta = obj["metadata"]
        patch = {"metadata": {"finalizers": [*(meta.get("finalizers") or []), finalizer],
                              "resourceVersion": meta["resourceVersion"]}}
        return self._patch(f"hold {self.kind}", obj, patch, absent=(404, 409))

    def release(self, obj: Obj, finalizer: str) -> bool:
        """Drop ``finalizer``; False when the object changed since or is gone."""
        meta = obj["metadata"]
        patch = {"metadata": {"finalizers": [f for f in meta.get("finalizers") or [] if f != finalizer],
                              "resourceVersion": meta["resourceVersion"]}}
        return self._patch(f"release {self.kind}", obj, patch, absent=(404, 409)) is not None

    def write_status(self, obj: Obj, status: Obj, *, conflict_is_temporary: bool = False) -> Obj | None:
        """Merge ``status`` into the object's status if it is still the version read; the
        object written, or None (gone, or changed since when a conflict is not temporary)."""
        meta = obj["metadata"]
        namespace, name = self._where(obj)
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        return api_json(f"write the status of {self.kind} {namespace}/{name}",
                        lambda: self.custom.patch_namespaced_custom_object_status(
                            self.group, self.version, namespace, self.plural, name, patch,
                            _content_type=MERGE_PATCH, _preload_content=False),
                        absent=(404,) if conflict_is_temporary else (404, 409))

    def _patch(self, what: str, obj: Obj, patch: Obj, *, absent: tuple[int, ...]) -> Obj | None:
        namespace, name = self._where(obj)
        return api_json(f"{what} {namespace}/{name}", lambda: self.custom.patch_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, name, patch,
            _content_type=MERGE_PATCH, _preload_content=False), absent=absent)
