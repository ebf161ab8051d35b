"""The read-only S3 gateway (``alnair_dataset.s3_gateway``) in front of a real redis-server
tier, reading a real S3 server (versitygw): an unchanged boto3 client pointed at it reads
every object byte-for-byte, ranges and listings as S3 gives them, through the cache; what it
does not serve is refused with an S3 error that says why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from cache_support import MIB, hydrate_directly, upload, write_dataset

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until
from alnair_dataset import DatasetReader, open_tier
from alnair_dataset.s3_gateway import S3Gateway


@pytest.fixture
def served(s3_server, redis_node, tmp_path, monkeypatch):
    """A bucket with a data set under ``train/`` (half of it cached), an object outside it,
    and a gateway serving the data set; the gateway reads the source with the AWS
    environment, as the sidecar does."""
    for k, v in {"AWS_ENDPOINT_URL_S3": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.access_key,
                 "AWS_SECRET_ACCESS_KEY": s3_server.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    bucket = s3_server.make_bucket()
    files = write_dataset(tmp_path / "src", files=4, size=MIB + 777)
    files.update(write_dataset(tmp_path / "src", files=30, size=3000, sub="small", seed=2))
    files["small/odd name+1 ü%20.bin"] = b"a key S3 clients must url-encode and decode"
    upload(s3_server.client(), bucket, "train", files)
    s3_server.client().put_object(Bucket=bucket, Key="other/config.json", Body=b"{}")
    url = redis_node().url
    monkeypatch.setenv("ALNAIR_CACHE_TIER_URL", url)  # for a gateway process of a test's own
    monkeypatch.setenv("ALNAIR_CACHE_PREFIX", "t")
    uri = f"s3://{bucket}/train"
    hydrate_directly(open_tier(url, budget_bytes=1 << 40, prefix="t"), "ds", uri, only=10, phase="hydrating")
    reader = DatasetReader("ds", tier_url=url, prefix="t", source=uri)
    gateway = S3Gateway([reader], "127.0.0.1:0").start()
    client = boto3.session.Session().client(
        "s3", endpoint_url=gateway.url, aws_access_key_id="any", aws_secret_access_key="any",
        region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    yield bucket, files, client, reader
    client.close()
    gateway.close()


def test_every_object_reads_as_the_source_through_the_cache(served):
    bucket, files, client, reader = served
    for rel, data in files.items():
        got = client.get_object(Bucket=bucket, Key=f"train/{rel}")
        assert got["Body"].read() == data, rel
        assert got["ContentLength"] == len(data)
    assert reader.stats.hits >= 10 and reader.stats.misses > 0  # half cached: both paths served
    reader.flush(30)
    before = reader.stats.misses
    for rel, data in files.items():  # the misses were written back: the next epoch hits
        assert client.get_object(Bucket=bucket, Key=f"train/{rel}")["Body"].read() == data
    assert reader.stats.misses == before


def test_ranges_heads_and_etags_are_those_of_s3(served, s3_server):
    bucket, files, client, _ = served
    rel = "train/part-001.bin"
    data = files["train/part-001.bin"]
    direct = s3_server.client().head_object(Bucket=bucket, Key=f"train/{rel}")
    head = client.head_object(Bucket=bucket, Key=f"train/{rel}")
    assert head["ContentLength"] == len(data) and head["ETag"] == direct["ETag"]
    for header, want in [("bytes=5-9", data[5:10]), (f"bytes={MIB - 3}-{MIB + 5}", data[MIB - 3:MIB + 6]),
                         ("bytes=100-", data[100:]), ("bytes=-17", data[-17:]),
                         (f"bytes=0-{10 * len(data)}", data)]:
        got = client.get_object(Bucket=bucket, Key=f"train/{rel}", Range=header)
        assert got["Body"].read() == want, header
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    with pytest.raises(ClientError) as e:
        client.get_object(Bucket=bucket, Key=f"train/{rel}", Range=f"bytes={len(data)}-")
    assert e.value.response["Error"]["Code"] == "InvalidRange"
    with pytest.raises(ClientError) as e:
        client.get_object(Bucket=bucket, Key=f"train/{rel}", IfMatch='"not-the-etag"')
    assert e.value.response["Error"]["Code"] == "PreconditionFailed"


def test_listings_page_and_group_as_s3_does(served, s3_server):
    bucket, files, client, _ = served
    keys = sorted(f"train/{rel}" for rel in files)
    paged = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="train/", PaginationConfig={"PageSize": 7}) for o in page.get("Contents", [])]
    assert paged == keys
    v1 = [o["Key"] for page in client.get_paginator("list_objects").paginate(
        Bucket=bucket, Prefix="train/", PaginationConfig={"PageSize": 5}) for o in page.get("Contents", [])]
    assert v1 == keys
    grouped = client.list_objects_v2(Bucket=bucket, Prefix="train/", Delimiter="/")
    direct = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="train/", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == \
        [p["Prefix"] for p in direct["CommonPrefixes"]] == ["train/small/", "train/train/"]
    sizes = {o["Key"]: o["Size"] for o in client.list_objects_v2(Bucket=bucket, Prefix="train/train/")["Contents"]}
    assert sizes == {k: len(files[k[len("train/"):]]) for k in keys if k.startswith("train/train/")}
    assert client.get_bucket_location(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    client.head_bucket(Bucket=bucket)
    assert [b["Name"] for b in client.list_buckets()["Buckets"]] == [bucket]


def test_what_is_not_served_is_refused_with_the_reason(served):
    bucket, _, client, _ = served
    cases = [
        (lambda: client.put_object(Bucket=bucket, Key="train/new.bin", Body=b"x" * 1000), "AccessDenied",
         "read-only"),
        (lambda: client.delete_object(Bucket=bucket, Key="train/train/part-000.bin"), "AccessDenied",
         "source's own endpoint"),
        (lambda: client.get_object(Bucket=bucket, Key="other/config.json"), "NoSuchKey",
         f"s3://{bucket}/train/ (data set ds)"),
        (lambda: client.get_object(Bucket="elsewhere", Key="train/x"), "NoSuchBucket", "is not served here"),
        (lambda: client.get_object_acl(Bucket=bucket, Key="train/train/part-000.bin"), "NotImplemented", "acl"),
    ]
    for call, code, says in cases:
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == code
        assert says in e.value.response["Error"]["Message"], e.value.response["Error"]
    # The connection survived every refusal: the next read is served.
    assert client.get_object(Bucket=bucket, Key="train/small/part-000.bin")["ContentLength"] == 3000


def test_a_dead_tier_is_read_around(served, redis_node):
    bucket, files, client, reader = served
    reader.tier.client.shutdown(nosave=True)  # the tier's redis-server goes away
    for rel, data in list(files.items())[:6]:
        assert client.get_object(Bucket=bucket, Key=f"train/{rel}")["Body"].read() == data


def test_a_data_set_that_is_not_from_s3_is_refused(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x")
    reader = DatasetReader("local", source=f"file://{tmp_path}")
    with pytest.raises(ValueError, match="serves only s3:// data sets"):
        S3Gateway([reader], "127.0.0.1:0")
    reader.close()


def test_an_address_off_loopback_is_refused_unless_allowed(served):
    """The gateway does not authenticate requests: off loopback, whoever reaches it would read
    the data sets with its AWS credentials, so that takes an explicit allow_remote."""
    reader = served[3]
    with pytest.raises(ValueError, match=r"'0\.0\.0\.0:0' is not loopback.*--allow-remote"):
        S3Gateway([reader], "0.0.0.0:0")
    with pytest.raises(ValueError, match="is not loopback"):
        S3Gateway([reader], "gateway.example:0")  # a name other than localhost is not trusted
    for loopback in ("localhost:0", "127.0.0.2:0", ":0"):
        S3Gateway([reader], loopback).server.server_close()  # (close() would close the reader too)
    allowed = S3Gateway([reader], "0.0.0.0:0", allow_remote=True)
    assert allowed.server.server_address[0] == "0.0.0.0"
    allowed.server.server_close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_gateway_stops_on_sigint_or_sigterm_and_gives_its_lease_back(sig, served):
    """Started where SIGINT is ignored (as a shell script's background job is), the gateway
    process still stops on SIGINT, and on SIGTERM, closing its reader: the data set's lease is
    given back at once, not left to expire while the data set counts as in use."""
    bucket, _, _, reader = served
    tier = open_tier(os.environ["ALNAIR_CACHE_TIER_URL"], budget_bytes=1 << 40, prefix="t")
    before = tier.readers("ds")  # the fixture's own reader
    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "alnair_dataset.s3_gateway", "--dataset", "ds", "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        client = boto3.session.Session().client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="any", aws_secret_access_key="any",
            region_name="us-east-1", config=Config(retries={"max_attempts": 1}))

        def serving() -> bool:
            try:
                return bool(client.list_objects_v2(Bucket=bucket, Prefix="train/")["KeyCount"])
            except (ClientError, BotoCoreError):
                assert gateway.poll() is None, gateway.stderr.read()
                return False

        wait_until(serving, timeout=30, interval=0.2, what="the gateway serving")
        assert tier.readers("ds") == before + 1
        gateway.send_signal(sig)
        _, err = gateway.communicate(timeout=20)
        assert gateway.returncode == 0, err
        assert tier.readers("ds") == before, "the gateway's lease outlived it"
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.communicate()  # reaps it and closes its stderr pipe
        tier.close()


def test_hostile_headers_are_answered_with_the_reason_and_the_gateway_goes_on(served):
    """A Range of 5,000 digits (int() raises ValueError past 4,300) and a write whose
    Content-Length is not a length (negative, letters, a non-ASCII digit: read(-1) would wait
    for the client to close) each get an S3 error answer; the next request is served."""
    import http.client
    from urllib.parse import urlsplit

    bucket, files, client, _ = served
    where = urlsplit(client.meta.endpoint_url)
    key = f"/{bucket}/train/small/part-000.bin"
    answers = []
    for method, headers in [("GET", {"Range": "bytes=" + "9" * 5000 + "-"}),
                            ("GET", {"Range": "bytes=-" + "9" * 5000}),
                            ("PUT", {"Content-Length": "-5"}), ("PUT", {"Content-Length": "abc"}),
                            ("PUT", {"Content-Length": "\u00b2"})]:
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
        conn.putrequest(method, key)
        for k, v in headers.items():
            conn.putheader(k, v.encode("latin-1"))
        conn.endheaders()
        reply = conn.getresponse()
        answers.append((reply.status, reply.read().decode()))
        conn.close()
    assert [a[0] for a in answers] == [416, 416, 400, 400, 400], answers
    assert all("<Error><Code>" in body for _, body in answers), answers
    assert "is not a length in bytes" in answers[2][1]
    assert client.get_object(Bucket=bucket, Key="train/small/part-000.bin")["Body"].read() == \
        files["small/part-000.bin"]
