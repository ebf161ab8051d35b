"""Source errors against the real S3 server: each becomes the error (and reason) a status
carries, never a botocore traceback."""

from __future__ import annotations

import pytest
from cache_support import upload

from alnair_common.natsd import free_port
from alnair_dataset import (
    AccessDeniedError,
    NoSuchBucketError,
    SourceChangedError,
    SourceUnreachableError,
    open_source,
)


def test_wrong_keys_missing_buckets_and_dead_endpoints_are_named(s3_server):
    bucket = s3_server.make_bucket()
    upload(s3_server.client(), bucket, "p", {"a.bin": b"x" * 10})
    wrong = {**s3_server.client_options(), "aws_secret_access_key": "not-the-secret"}
    dead = {**s3_server.client_options(), "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    sources = [open_source(f"s3://{bucket}/p", s3_options=wrong),
               open_source("s3://nope/p", s3_options=s3_server.client_options()),
               open_source(f"s3://{bucket}/p", s3_options=dead)]
    try:
        with pytest.raises(AccessDeniedError, match="access denied") as denied:
            sources[0].list()
        assert denied.value.reason == "access-denied" and not denied.value.temporary
        with pytest.raises(NoSuchBucketError, match="'nope' does not exist"):
            sources[1].list()
        with pytest.raises(SourceUnreachableError) as unreachable:
            sources[2].list()
        assert unreachable.value.temporary
    finally:
        for source in sources:
            source.close()


def test_an_object_replaced_after_listing_is_not_read_as_the_listed_version(s3_server):
    bucket = s3_server.make_bucket()
    s3 = s3_server.client()
    upload(s3, bucket, "p", {"a.bin": b"first version"})
    source = open_source(f"s3://{bucket}/p", s3_options=s3_server.client_options())
    (listed,) = source.list()
    assert source.read(listed) == b"first version"
    s3.put_object(Bucket=bucket, Key="p/a.bin", Body=b"second version")
    with pytest.raises(SourceChangedError, match="changed since it was listed"):
        source.read(listed)
    s3.delete_object(Bucket=bucket, Key="p/a.bin")
    with pytest.raises(SourceChangedError):
        source.read(listed)
    source.close()
