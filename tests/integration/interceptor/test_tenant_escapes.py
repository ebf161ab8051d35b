"""Limits a tenant cannot loosen (issue 19 §3): every way a tenant was seen to escape its
memory limit, tried against the real interceptor on the fake driver, in container mode,
with the device plugin's real Allocate answer (container_harness). The pod's limit is
4 GiB; the tenant program asks for up to 8.

The escapes, each its own test: the environment's variables unset; ALNAIR_WORKSPACE pointed
at a directory of the tenant's; the limits file edited, replaced, or written in the tenant's
own directory; the region deleted before the first CUDA call; the region's counters zeroed
while memory is held; the variable raised (ignored) or lowered (honoured); LD_PRELOAD
dropped. The tests whose point is that a write FAILS run inside a user+mount namespace with
the grant's mounts applied for real (read-only where the grant says so, /etc/ld.so.preload
included).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from container_harness import GIB, LIMIT_GIB, Pod, dynamic_loader, last_json, namespaces_available, zero_region_slots
from interceptor_harness import NativeBuild

from alnair_common.cuda_region import read_region

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def testlib(native_build: NativeBuild) -> Path:
    """The test library (fixed limits path in the build directory) and the fake driver."""
    root = native_build.root
    done = native_build.make(f"{root}/testlib/libalnair_cuda.so", f"{root}/fake/libcuda.so.1",
                             f"{root}/fake/libnvidia-ml.so.1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root / "testlib" / "libalnair_cuda.so"


@pytest.fixture
def fixed_limits(native_build: NativeBuild) -> Iterator[Path]:
    """The test library's fixed limits path. Shared by every test of the build, so none may
    leave it behind: a fixed file turns every later process of that build into a container."""
    path = native_build.root / "trusted" / "limits"
    shutil.rmtree(path.parent, ignore_errors=True)
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture
def pod(tmp_path: Path, testlib: Path, fixed_limits: Path) -> Pod:
    return Pod(tmp_path, testlib, fixed_limits, contained=False)


@pytest.fixture
def contained_pod(tmp_path: Path, testlib: Path, fixed_limits: Path) -> Pod:
    reason = namespaces_available()
    if reason is not None:
        pytest.skip(f"the mounts cannot be applied here ({reason}); the mount specs are checked "
                    "by tests/integration/device_plugin/test_dp_allocate.py")
    return Pod(tmp_path, testlib, fixed_limits, contained=True)


def test_the_pod_gets_its_limit_and_no_more(pod: Pod) -> None:
    """The baseline every escape is measured against."""
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB
    header = read_region(pod.region).header
    assert (header.memory_limit_bytes, header.limits_source, header.workload_id) == (LIMIT_GIB * GIB, "file",
                                                                                      "ml/train")


def test_escape_by_unsetting_the_environment_is_refused(pod: Pod) -> None:
    # env -u ALNAIR_WORKSPACE -u ALNAIR_VGPU_MEMORY_BYTES ...
    done = pod.run(env=pod.env(ALNAIR_WORKSPACE=None, ALNAIR_VGPU_MEMORY_BYTES=None, ALNAIR_WORKLOAD_ID=None))
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB
    assert read_region(pod.region).header.workload_id == "ml/train"  # the region is still the pod's


def test_escape_by_redirecting_the_workspace_is_refused(pod: Pod, tmp_path: Path) -> None:
    own = tmp_path / "tenant"
    own.mkdir()
    (own / "limits").write_text("compute_percent = 100\n")  # "a key left out means no limit"
    done = pod.run(env=pod.env(ALNAIR_WORKSPACE=str(own)))
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB
    assert not (own / "cuda.region").exists()  # the tenant's directory is not the workspace
    assert read_region(pod.region).slots[0].devices[0].memory_peak_bytes == LIMIT_GIB * GIB


@pytest.mark.parametrize("how", ["edited", "replaced", "own-dir"])
def test_escape_by_a_tenant_written_limits_file_is_refused(pod: Pod, tmp_path: Path, how: str) -> None:
    """Whatever limits file the tenant manages to write (in a container it cannot write the
    workspace's: test_in_a_container_the_limits_file_cannot_be_written), only the fixed one
    is read."""
    loose = "compute_percent = 100\n"
    env = pod.env()
    target = pod.host_workspace / "limits"
    if how == "edited":
        target.chmod(0o644)
        target.write_text(loose)
    elif how == "replaced":
        (pod.host_workspace / "limits.new").write_text(loose)
        (pod.host_workspace / "limits.new").replace(target)
    else:
        own = tmp_path / "tenant"
        own.mkdir()
        (own / "limits").write_text(loose)
        env = pod.env(ALNAIR_WORKSPACE=str(own), ALNAIR_VGPU_MEMORY_BYTES=None)
    done = pod.run(env=env)
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB


def test_escape_by_deleting_the_region_before_the_first_call_is_refused(pod: Pod) -> None:
    """A region the device plugin did not create is not started afresh (that would forget
    what other processes hold): every allocation is refused, with a reason. In a container
    the deletion itself fails (test_in_a_container_the_region_cannot_be_deleted)."""
    pod.region.unlink()
    done = pod.run()
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == 0
    assert "cannot open region" in done.stderr and "refusing all GPU memory allocations" in done.stderr
    assert not pod.region.exists()


def test_escape_by_zeroing_the_region_mid_run_is_refused(pod: Pod) -> None:
    """What the processes hold is in the kernel's record locks, not in the region: zeroing
    every slot (and raising the header's limit) while a process holds 3 GiB gives the next
    process 1 GiB, not 4, and the holder no more than its 1 GiB either."""
    holder = pod.start_holding(3, then=2)
    zero_region_slots(pod.region)
    other = pod.run()
    assert other.returncode == 0, other.stderr
    assert other.result["gib"] == 1
    assert Pod.go_on(holder) == {"then": 1}


def test_escape_by_raising_the_limit_variable_is_refused(pod: Pod) -> None:
    done = pod.run(env=pod.env(ALNAIR_VGPU_MEMORY_BYTES=str(8 * GIB)))
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB


def test_lowering_the_limit_variable_is_honoured(pod: Pod) -> None:
    done = pod.run(env=pod.env(ALNAIR_VGPU_MEMORY_BYTES="2Gi", ALNAIR_VGPU_COMPUTE_PERCENT="20"))
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == 2
    assert read_region(pod.region).header.compute_percent == 20


def test_escape_by_emptying_the_limit_variable_is_refused(pod: Pod) -> None:
    done = pod.run(env=pod.env(ALNAIR_VGPU_MEMORY_BYTES=""))
    assert done.returncode == 0, done.stderr
    assert done.result["gib"] == LIMIT_GIB


def test_escape_by_dropping_ld_preload_is_refused_when_the_loader_preloads(pod: Pod) -> None:
    """The loader's own preload (``ld.so --preload``: the code path /etc/ld.so.preload takes)
    with no LD_PRELOAD anywhere in the environment. The real /etc/ld.so.preload, which also
    reaches every child: test_in_a_container_ld_so_preload_holds_without_ld_preload."""
    env = pod.env(LD_PRELOAD=None)
    done = pod.run([dynamic_loader(), "--preload", str(pod.testlib), *pod.command()], env=env)
    assert done.returncode == 0, done.stderr
    assert done.result == {"gib": LIMIT_GIB, "ld_preload": None}


# ---- inside a container: the grant's mounts applied for real --------------------------------

def test_in_a_container_the_limits_file_cannot_be_written(contained_pod: Pod) -> None:
    pod = contained_pod
    fixed, ws = pod.fixed_limits, pod.workspace
    before = (pod.host_workspace / "limits").read_text()
    done = pod.run_contained(f"""
        for f in {fixed} {ws}/limits; do
            printf 'compute_percent = 100\\n' > "$f" && echo "WROTE $f"
            rm -f "$f" && echo "REMOVED $f"
            mv -f /etc/hostname "$f" && echo "REPLACED $f"
        done
        touch {ws}/new && echo "CREATED"
        mkdir -p /tmp/t && printf 'compute_percent = 100\\n' > /tmp/t/limits
        ALNAIR_WORKSPACE=/tmp/t eval "$TENANT"
    """, pod.env())
    # Every write, removal and replacement failed (EROFS, or EBUSY for a mount point)...
    assert "WROTE" not in done.stdout and "REMOVED" not in done.stdout, done.stdout
    assert "REPLACED" not in done.stdout and "CREATED" not in done.stdout, done.stdout
    assert "Read-only file system" in done.stderr, done.stderr
    assert (pod.host_workspace / "limits").read_text() == before
    assert sorted(p.name for p in pod.host_workspace.iterdir()) == ["cuda.region", "ld.so.preload", "limits"]
    # ...and the limits file of the tenant's own directory was not read.
    assert last_json(done.stdout)["gib"] == LIMIT_GIB
    # The interceptor sees it too: it warns about a fixed file the process could write.
    assert "is writable by this process" not in done.stderr


def test_in_a_container_the_region_cannot_be_deleted(contained_pod: Pod) -> None:
    pod = contained_pod
    region = pod.workspace / "cuda.region"
    done = pod.run_contained(f"""
        rm -f {region} && echo "REMOVED"
        mv -f {region} {region}.old && echo "MOVED"
        cp /etc/hostname /tmp/r && mv -f /tmp/r {region} && echo "REPLACED"
        eval "$TENANT"
    """, pod.env())
    assert "REMOVED" not in done.stdout and "MOVED" not in done.stdout and "REPLACED" not in done.stdout, \
        done.stdout + done.stderr
    assert last_json(done.stdout)["gib"] == LIMIT_GIB
    assert read_region(pod.region).header.memory_limit_bytes == LIMIT_GIB * GIB


def test_in_a_container_ld_so_preload_holds_without_ld_preload(contained_pod: Pod) -> None:
    """/etc/ld.so.preload (the grant's mount) loads the library into every process: one that
    dropped LD_PRELOAD, and a child started with an empty environment."""
    pod = contained_pod
    done = pod.run_contained("""
        env -u LD_PRELOAD bash -c "$TENANT 2"
        env -i LD_LIBRARY_PATH="$LD_LIBRARY_PATH" bash -c "$TENANT 8"
    """, pod.env())
    results = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 2, done.stdout + done.stderr
    first, second = (last_json(line) for line in results)
    assert first == {"gib": 2, "ld_preload": None}
    assert second == {"gib": LIMIT_GIB, "ld_preload": None}
