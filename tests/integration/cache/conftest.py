from alnair_common.testing.dataplane import (  # noqa: F401 — fixtures
    dataplane_bin,
    redis_cluster,
    redis_node,
    s3_server,
)
