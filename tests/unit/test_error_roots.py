"""One exception root per package, under ``alnair_common.AlnairError``, and each concrete
error's retry class.

Callers decide on the class: a durable consumer terms a :class:`PermanentError` and naks a
:class:`TemporaryError` after its ``retry_after``; the device plugin waits for a
``NoAssignmentError`` to clear. A change of class is a change of behaviour, so this table
pins it. "neither" marks errors whose retry decision the caller makes from where it stands.
"""

from __future__ import annotations

import pytest

import alnair_cache_hydrator
import alnair_dataset
import alnair_device_plugin
import alnair_elastic_job
import alnair_gpu
import alnair_kubelet
import alnair_profiler
from alnair_cli._profile import ProfileNotFoundError
from alnair_cli._run import RunError
from alnair_common import AlnairError, PermanentError, TemporaryError
from alnair_profiler._domain import InvalidInputError
from alnair_profiler._prometheus import PrometheusError

ROOTS = [
    (alnair_gpu, "GpuError"),
    (alnair_kubelet, "KubeletError"),
    (alnair_device_plugin, "DevicePluginError"),
    (alnair_profiler, "ProfilerError"),
    (alnair_cache_hydrator, "CacheHydratorError"),
    (alnair_elastic_job, "ElasticJobError"),
]

CLASSES: list[tuple[type[Exception], type[Exception], str]] = [
    (alnair_gpu.GpuUnavailableError, alnair_gpu.GpuError, "temporary"),
    (alnair_gpu.InventoryFormatError, alnair_gpu.GpuError, "permanent"),
    (alnair_gpu.SampleSourceError, alnair_gpu.GpuError, "neither"),
    (alnair_kubelet.KubeletUnavailableError, alnair_kubelet.KubeletError, "temporary"),
    (alnair_kubelet.UnsupportedCgroupError, alnair_kubelet.KubeletError, "permanent"),
    (alnair_device_plugin.NoAssignmentError, alnair_device_plugin.DevicePluginError, "temporary"),
    (alnair_device_plugin.InvalidDevicesError, alnair_device_plugin.DevicePluginError, "permanent"),
    (alnair_profiler.StoreUnavailableError, alnair_profiler.ProfilerError, "temporary"),
    (PrometheusError, alnair_profiler.ProfilerError, "temporary"),
    (InvalidInputError, alnair_profiler.ProfilerError, "permanent"),
    (alnair_cache_hydrator.InvalidRequestError, alnair_cache_hydrator.CacheHydratorError, "permanent"),
    (alnair_cache_hydrator.TierBusyError, alnair_cache_hydrator.CacheHydratorError, "temporary"),
    (alnair_elastic_job.JobSpecError, alnair_elastic_job.ElasticJobError, "permanent"),
    (RunError, AlnairError, "permanent"),
    (ProfileNotFoundError, AlnairError, "permanent"),
]


def retry_class(cls: type[Exception]) -> str:
    temporary, permanent = issubclass(cls, TemporaryError), issubclass(cls, PermanentError)
    assert not (temporary and permanent), f"{cls.__name__} is both temporary and permanent"
    return "temporary" if temporary else "permanent" if permanent else "neither"


@pytest.mark.parametrize(("package", "root"), ROOTS, ids=[r for _, r in ROOTS])
def test_each_package_has_one_root_under_alnair_error_and_exports_it(package, root) -> None:
    cls = getattr(package, root)
    assert issubclass(cls, AlnairError)
    assert root in package.__all__
    assert retry_class(cls) == "neither", "a root classifies nothing; its subclasses do"


@pytest.mark.parametrize(("cls", "root", "kind"), CLASSES, ids=[c.__name__ for c, _, _ in CLASSES])
def test_each_error_sits_under_its_root_with_its_retry_class(cls, root, kind) -> None:
    assert issubclass(cls, root) and issubclass(cls, AlnairError)
    assert retry_class(cls) == kind


@pytest.mark.parametrize("cls", [c for c, _, kind in CLASSES if kind == "temporary"],
                         ids=lambda c: c.__name__)
def test_temporary_errors_keep_the_message_only_constructor_and_retry_after(cls) -> None:
    plain = cls("the server is away")
    assert str(plain) == "the server is away" and plain.retry_after == 1.0
    assert cls("again", retry_after=2.5).retry_after == 2.5


def test_profile_not_found_is_still_a_lookup_error() -> None:
    assert issubclass(ProfileNotFoundError, LookupError)
    with pytest.raises(LookupError):
        raise ProfileNotFoundError("no profile named 'x'")



def test_the_data_client_stands_alone() -> None:
    """alnair_dataset is installed inside arbitrary training images and depends on nothing of
    the platform, so its root is a plain Exception — with its own temporary flag instead."""
    assert not issubclass(alnair_dataset.DatasetError, AlnairError)
    assert "DatasetError" in alnair_dataset.__all__
    assert alnair_dataset.DatasetError.temporary is False
