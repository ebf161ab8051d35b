import pytest  # noqa: E402

from alnair_common.testing.dataplane import (  # noqa: F401 — fixtures
    dataplane_bin,
    redis_cluster,
    redis_node,
    s3_server,
)


@pytest.fixture(params=["single", "cluster"])
def redis_url(request):
    """A redis-server or a 3-server Redis Cluster: the two ways a Redis tier runs."""
    if request.param == "single":
        return request.getfixturevalue("redis_node")().url
    return request.getfixturevalue("redis_cluster")(masters=3).url
