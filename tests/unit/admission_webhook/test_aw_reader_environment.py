"""The data client's reading of the environment the webhook (and `alnair run`) writes."""

from __future__ import annotations

import pytest

from alnair_admission_webhook import CacheEndpoint, PodDataset
from alnair_dataset import InvalidSpecError, dataset_environment, dataset_variable


def test_the_single_form_is_read_as_before() -> None:
    env = {"ALNAIR_DATASET": "imagenet", "ALNAIR_DATASET_SOURCE": "file:///data"}
    d = dataset_environment(environ=env)
    assert (d.name, d.key, d.source, d.path) == ("imagenet", "imagenet", "file:///data", "")
    # an explicit name still falls back to ALNAIR_DATASET_SOURCE, as it always did
    assert dataset_environment("other", env).source == "file:///data"


def test_no_data_set_named_is_a_clear_error() -> None:
    with pytest.raises(InvalidSpecError, match=r"pass name= or set \$ALNAIR_DATASET"):
        dataset_environment(environ={})


def test_several_data_sets_need_a_name_and_each_finds_its_own_source() -> None:
    env = {"ALNAIR_DATASETS": "imagenet,coco-2017",
           "ALNAIR_DATASET_IMAGENET_SOURCE": "s3://i/", "ALNAIR_DATASET_COCO_2017_SOURCE": "s3://c/",
           "ALNAIR_DATASET_COCO_2017_PATH": "/data/coco"}
    with pytest.raises(InvalidSpecError, match=r"names 2 data sets \(imagenet, coco-2017\)"):
        dataset_environment(environ=env)
    assert dataset_environment("coco-2017", env).source == "s3://c/"
    assert dataset_environment("coco-2017", env).path == "/data/coco"
    assert dataset_environment("imagenet", env).path == ""


def test_a_list_of_one_is_the_default_and_the_namespace_makes_the_tier_key() -> None:
    env = {"ALNAIR_DATASETS": "imagenet", "ALNAIR_DATASET_NAMESPACE": "team-a"}
    d = dataset_environment(environ=env)
    assert (d.name, d.key) == ("imagenet", "team-a.imagenet")


def test_the_webhooks_variable_names_are_the_readers() -> None:
    from alnair_admission_webhook._pod_env import dataset_variable as webhook_variable
    from alnair_admission_webhook._pod_env import shared_environment

    for name in ("imagenet", "coco-2017", "hostpath-data-0123456789"):
        assert webhook_variable(name, "SOURCE") == dataset_variable(name, "SOURCE")
    env = dict(shared_environment([PodDataset("a", "s3://a/"), PodDataset("b-c", "file:///b")],
                                  "ns", CacheEndpoint("redis://t:6379/0")))
    assert dataset_environment("b-c", env).source == "file:///b"
    assert dataset_environment("b-c", env).key == "ns.b-c"
