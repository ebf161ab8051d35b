"""The one parser of the dataset annotations (alnair_common.dataset_refs)."""

import pytest

from alnair_common.dataset_refs import (
    DatasetRef,
    DatasetRefError,
    host_path_name,
    pod_datasets,
    pod_host_paths,
)


def test_alnair_annotation_names_datasets_in_order_once():
    refs = pod_datasets({"ai.centaurus.io/dataset": "imagenet, coco,imagenet"})
    assert refs == [DatasetRef("imagenet"), DatasetRef("coco")]


@pytest.mark.parametrize("value, fragment", [
    ("", "is empty"), (" , ", "is empty"), ("a,,b", "empty name between commas"),
    ("ImageNet", "lower-case"), ("a.b", "lower-case"), ("-a", "starting and ending"),
    ("x" * 64, "1 to 63"),
])
def test_bad_alnair_annotation_is_refused_with_the_fix(value, fragment):
    with pytest.raises(DatasetRefError, match=fragment):
        pod_datasets({"ai.centaurus.io/dataset": value})


def test_seed_form_makes_one_dataset_per_host_path_volume():
    spec = {"volumes": [{"name": "data", "hostPath": {"path": "/mnt/datasets/cifar10/"}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "more", "hostPath": {"path": "/mnt/datasets/Mini ImageNet"}}]}
    refs = pod_datasets({"cacheDataset": "yes"}, pod_host_paths(spec))
    assert [(r.source, r.volume) for r in refs] == [
        ("file:///mnt/datasets/cifar10", "data"), ("file:///mnt/datasets/Mini ImageNet", "more")]
    assert refs[0].name == host_path_name("/mnt/datasets/cifar10")
    assert refs[0].name.startswith("hostpath-cifar10-")
    assert refs[1].name.startswith("hostpath-mini-imagenet-")
    # the same directory spelled differently is the same data set; another one is not
    assert host_path_name("mnt/datasets/cifar10//") == host_path_name("/mnt/datasets/cifar10")
    assert host_path_name("/other/cifar10") != refs[0].name
    assert all(len(r.name) <= 63 for r in refs)


def test_seed_form_without_host_paths_says_what_to_use_instead():
    with pytest.raises(DatasetRefError, match="ai.centaurus.io/dataset instead"):
        pod_datasets({"cacheDataset": "yes"}, [])


def test_seed_form_other_values_and_no_annotation_mean_nothing():
    paths = [("data", "/mnt/d")]
    assert pod_datasets({"cacheDataset": "no"}, paths) == []
    assert pod_datasets({}, paths) == []
    both = pod_datasets({"cacheDataset": "yes", "ai.centaurus.io/dataset": "coco"}, paths)
    assert [r.name for r in both] == ["coco", host_path_name("/mnt/d")]
