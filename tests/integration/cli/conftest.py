from alnair_common.testing.dataplane import (  # noqa: F401 — fixtures
    dataplane_bin,
    s3_server,
)
