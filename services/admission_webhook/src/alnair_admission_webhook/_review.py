"""AdmissionReview v1 in and out: the only place that knows the wire format.

A review that is not a pod CREATE is allowed unchanged (the MutatingWebhookConfiguration asks
for pod CREATEs only; anything else means it was edited). A body that is not an
AdmissionReview is a :class:`ReviewError`, answered 400 with the reason: the API server then
applies the failurePolicy (Ignore: the pod is admitted unmutated).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import ReviewError
from ._mutation import PodMutation

API_VERSION = "admission.k8s.io/v1"



@dataclass(frozen=True)
class PodReview:
    """The parts of an AdmissionReview request the webhook uses."""

    uid: str
    namespace: str
    pod: Mapping[str, Any] | None  # None: not a pod CREATE, allowed as it is
    dry_run: bool


def parse_review(body: bytes) -> PodReview:
    try:
        review = json.loads(body)
    except ValueError as e:
        raise ReviewError(f"the body is not JSON ({e}); expected an AdmissionReview") from e
    if not isinstance(review, dict) or review.get("apiVersion") != API_VERSION \
            or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected kind AdmissionReview of apiVersion {API_VERSION}; set "
                          "admissionReviewVersions: [v1] in the MutatingWebhookConfiguration")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise ReviewError("the AdmissionReview has no request with a uid")
    kind = request.get("kind") or {}
    obj = request.get("object")
    is_pod_create = (request.get("operation") == "CREATE" and kind.get("kind") == "Pod"
                     and not kind.get("group") and isinstance(obj, dict))
    return PodReview(request["uid"], str(request.get("namespace") or ""),
                     obj if is_pod_create else None, bool(request.get("dryRun")))


def review_response(uid: str, mutation: PodMutation | None = None) -> bytes:
    """The AdmissionReview answer: always allowed; with the JSON patch if there is one."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if mutation is not None and mutation.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(mutation.patch, separators=(",", ":")).encode()).decode()
    if mutation is not None and mutation.warnings:
        response["warnings"] = mutation.warnings
    return json.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview",
                       "response": response}, separators=(",", ":")).encode()
