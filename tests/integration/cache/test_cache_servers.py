"""The harness's servers for the dataset cache: a real S3 server and a real Redis Cluster."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError


def test_s3_server_serves_objects_and_ranges(s3_server):
    bucket = s3_server.make_bucket()
    s3 = s3_server.client()
    s3.put_object(Bucket=bucket, Key="train/0.bin", Body=b"0123456789")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("train/0.bin", 10)]
    assert s3.get_object(Bucket=bucket, Key="train/0.bin", Range="bytes=2-4")["Body"].read() == b"234"
    assert (s3_server.root / bucket / "train" / "0.bin").read_bytes() == b"0123456789"
    with pytest.raises(ClientError, match="NoSuchBucket"):
        s3.list_objects_v2(Bucket="no-such-bucket")


def test_s3_server_refuses_wrong_keys(s3_server):
    import boto3

    options = {**s3_server.client_options(), "aws_secret_access_key": "wrong"}
    wrong = boto3.client("s3", **options)
    with pytest.raises(ClientError, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKey"):
        wrong.list_buckets()
    wrong.close()


def test_redis_cluster_spreads_keys_over_every_server(redis_cluster):
    plane = redis_cluster(masters=3)
    client = plane.client()
    for i in range(300):
        client.set(f"chunk:{i}", b"x")
    sizes = [node.client().dbsize() for node in plane.nodes]
    assert sum(sizes) == 300 and min(sizes) > 50
