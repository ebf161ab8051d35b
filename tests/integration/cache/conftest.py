import os  # noqa: E402

import pytest  # noqa: E402

from alnair_common.testing.dataplane import (  # noqa: F401 — fixtures
    dataplane_bin,
    redis_cluster,
    redis_node,
    s3_server,
)
from alnair_dataset import MountError, spawn_mount, unmount  # noqa: E402


@pytest.fixture(params=["single", "cluster"])
def redis_url(request):
    """A redis-server or a 3-server Redis Cluster: the two ways a Redis tier runs."""
    if request.param == "single":
        return request.getfixturevalue("redis_node")().url
    return request.getfixturevalue("redis_cluster")(masters=3).url


def _fuse_gap() -> str | None:
    """Why this machine cannot mount, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine: FUSE mounts are not tested here"
    try:
        import mfusepy  # noqa: F401
    except OSError as e:
        return f"libfuse is not installed ({e}): apt-get install libfuse2 fuse3"
    return None


@pytest.fixture(scope="module")
def fuse_ok(tmp_path_factory):
    """Skips unless a probe data set actually mounts here (device present, mounting allowed)."""
    gap = _fuse_gap()
    if gap:
        pytest.skip(gap)
    root = tmp_path_factory.mktemp("probe")
    (root / "src").mkdir()
    (root / "src" / "f").write_bytes(b"probe")
    (root / "mnt").mkdir()
    try:
        spawn_mount(["probe"], root / "mnt", source=f"file://{root}/src", timeout=30,
                    log_path=str(root / "log"))
    except MountError as e:
        pytest.skip(f"mounting is not permitted on this machine: {e}")
    unmount(root / "mnt")
