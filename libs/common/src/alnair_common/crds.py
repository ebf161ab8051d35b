"""The skeleton of Alnair's CustomResourceDefinitions: one place for what every CRD shares.

Each kind (TrainingJob in elastic-job, Dataset in kube-bridge) writes its own spec and status
schemas; this module puts them into an ``apiextensions.k8s.io/v1`` document with the same
conventions everywhere: namespaced, one served and stored version, a status subresource,
printer columns, and a CEL rule that holds ``metadata.name`` to a DNS-1123 label (names
become pod names, label values, bus subject tokens and tier keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAME_MESSAGE = ("metadata.name must be a DNS-1123 label: at most 63 lower-case letters, digits "
                 "and '-', starting and ending alphanumeric")

# (name, type, JSON path, priority): priority 1 columns show with `kubectl get -o wide` only.
Column = tuple[str, str, str, int]


def rule(expression: str, message: str) -> dict[str, str]:
    """One CEL validation (``x-kubernetes-validations`` item) with the message users read."""
    return {"rule": expression, "message": message}


def custom_resource_definition(*, group: str, version: str, kind: str, plural: str, singular: str,
                               columns: Sequence[Column], spec: dict[str, Any],
                               status: dict[str, Any], short_names: Sequence[str] = (),
                               name_note: str = "") -> dict[str, Any]:
    """The whole CRD document; ``name_note`` adds to the name rule's message why it matters."""
    names: dict[str, Any] = {"plural": plural, "singular": singular, "kind": kind}
    if short_names:
        names["shortNames"] = list(short_names)
    message = f"{_NAME_MESSAGE} ({name_note})" if name_note else _NAME_MESSAGE
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": names,
            "versions": [{
                "name": version, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": n, "type": t, "jsonPath": p}
                                             | ({"priority": priority} if priority else {})
                                             for n, t, p, priority in columns],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "x-kubernetes-validations": [
                        rule(f"size(self.metadata.name) <= 63 && self.metadata.name.matches('{DNS_LABEL}')",
                             message),
                    ],
                    "properties": {"spec": spec, "status": status},
                }},
            }],
        },
    }
