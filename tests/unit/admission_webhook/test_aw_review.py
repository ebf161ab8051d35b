"""AdmissionReview v1 parsing and answers."""

from __future__ import annotations

import base64
import json

import pytest

from alnair_admission_webhook import PodMutation, ReviewError, parse_review, review_response


def review(**request: object) -> bytes:
    base = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE", "namespace": "ns", "object": {"metadata": {}}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {**base, **request}}).encode()


def test_a_pod_create_is_parsed_and_anything_else_is_passed_through() -> None:
    r = parse_review(review(dryRun=True))
    assert (r.uid, r.namespace, r.pod, r.dry_run) == ("u-1", "ns", {"metadata": {}}, True)
    assert parse_review(review(operation="UPDATE")).pod is None
    assert parse_review(review(kind={"group": "apps", "version": "v1", "kind": "Pod"})).pod is None


@pytest.mark.parametrize("body, says", [
    (b"not json", "not JSON"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
     "admissionReviewVersions"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
     "no request with a uid"),
])
def test_a_body_that_is_not_a_review_is_an_error_saying_what_is_wrong(body: bytes, says: str) -> None:
    with pytest.raises(ReviewError, match=says):
        parse_review(body)


def test_the_answer_carries_the_patch_and_warnings_only_when_there_are_some() -> None:
    plain = json.loads(review_response("u-1", PodMutation()))
    assert plain["response"] == {"uid": "u-1", "allowed": True}
    ops = [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}]
    full = json.loads(review_response("u-2", PodMutation(patch=ops, warnings=["w"])))["response"]
    assert full["patchType"] == "JSONPatch" and full["warnings"] == ["w"]
    assert json.loads(base64.b64decode(full["patch"])) == ops
