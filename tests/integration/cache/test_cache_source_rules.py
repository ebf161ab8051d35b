"""The hydrator reads every source with its own S3 credentials and mounts, for every tenant:
a tenant must not have it cache what another tenant's bucket or directory holds. Real
nats-server, redis-server and versitygw (S3)."""

from __future__ import annotations

import pytest
from cache_support import upload, write_dataset
from hydrator_support import PHASE, add, running, settings, settled, spec, status

from alnair.v1 import cache_pb2
from alnair_dataset import open_tier


@pytest.fixture
def s3_keys(s3_server, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def stored(tier_url: str) -> int:
    return open_tier(tier_url, budget_bytes=1 << 40, prefix="t").usage().stored_bytes


async def test_a_namespace_caches_only_the_sources_its_rules_name(
        bus, nats_server, redis_node, s3_server, s3_keys, tmp_path):
    tier_url = redis_node().url
    files = write_dataset(tmp_path / "gen", files=2, size=100_000)
    mine, theirs = s3_server.make_bucket(), s3_server.make_bucket()
    upload(s3_server.client(), mine, "imgs", files)
    upload(s3_server.client(), theirs, "private", files)
    write_dataset(tmp_path / "dirs" / "team-b", files=1, size=1000)
    s = settings(nats_server.url, tier_url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources=f"team-a=s3://{mine},team-b=s3://{theirs},"
                                       f"team-b=file://{tmp_path}/dirs/team-b")
    async with running(s):
        cases = {  # name: (source, reason, what the message says)
            "other-bucket": (f"s3://{theirs}/private", "path-not-allowed",
                             f"outside what the cache may read for namespace 'team-a' "
                             f"(allowed: s3://{mine})"),
            "dot-dot": (f"s3://{mine}/../{theirs}/private", "invalid-spec", "'..' segment"),
            "directory": (f"file://{tmp_path}/dirs/team-b", "path-not-allowed",
                          "ALNAIR_CACHE_ALLOWED_SOURCES='team-a=file:///directory' or ALNAIR_CACHE_ALLOWED_ROOTS"),
        }
        for name, (source, reason, text) in cases.items():
            st = await settled(bus, f"team-a.{name}",
                               await add(bus, spec(name, source, namespace="team-a")))
            assert (st.phase, st.reason) == (PHASE.CACHE_PHASE_FAILED, reason), st.message
            assert text in st.message
            if reason == "path-not-allowed":  # the rules named are this namespace's only
                assert theirs not in st.message.split("(allowed:")[1]
        assert stored(tier_url) == 0  # not one byte of the other namespace's data

        ok = await settled(bus, "team-a.imgs", await add(bus, spec(
            "imgs", f"s3://{mine}/imgs", namespace="team-a")))
        assert ok.phase == PHASE.CACHE_PHASE_READY and ok.files_cached == 2, ok.message
        # the owner of the other bucket caches it; local data sets (no namespace) have no rule
        ok = await settled(bus, "team-b.private", await add(bus, spec(
            "private", f"s3://{theirs}/private", namespace="team-b")))
        assert ok.phase == PHASE.CACHE_PHASE_READY, ok.message
        local = await settled(bus, "private", await add(bus, spec("private", f"s3://{theirs}/private")))
        assert (local.phase, local.reason) == (PHASE.CACHE_PHASE_FAILED, "path-not-allowed")
        assert "for local data sets (allowed: none)" in local.message


def no_default_credentials(monkeypatch, tmp_path) -> None:
    """No S3 keys in the environment, in ~/.aws or from an instance role."""
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


async def test_no_s3_credentials_is_access_denied_with_the_fix(
        bus, nats_server, redis_node, s3_server, tmp_path, monkeypatch):
    no_default_credentials(monkeypatch, tmp_path)
    bucket = s3_server.make_bucket()
    s = settings(nats_server.url, redis_node().url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources="s3://")
    async with running(s):
        st = await settled(bus, "x", await add(bus, spec("x", f"s3://{bucket}/x")))
    assert (st.phase, st.reason) == (PHASE.CACHE_PHASE_FAILED, "access-denied"), st.message
    assert "no S3 credentials in this process; give it AWS_ACCESS_KEY_ID" in st.message


async def test_each_namespace_reads_s3_with_the_profile_named_for_it(
        bus, nats_server, redis_node, s3_server, tmp_path, monkeypatch):
    """Keys per tenant, in a credentials file as an operator mounts one from a Secret: team-b's
    keys are wrong, so its data set is refused although team-a's, same bucket, is read."""
    no_default_credentials(monkeypatch, tmp_path)
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[team-a]\naws_access_key_id = {s3_server.access_key}\n"
        f"aws_secret_access_key = {s3_server.secret_key}\n\n"
        f"[team-b]\naws_access_key_id = {s3_server.access_key}\naws_secret_access_key = wrong\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    bucket = s3_server.make_bucket()
    upload(s3_server.client(), bucket, "imgs", write_dataset(tmp_path / "gen", files=1, size=1000))
    s = settings(nats_server.url, redis_node().url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources="s3://", cache_s3_profiles="team-a=team-a,team-b=team-b,team-c=gone")
    expected = {"team-a": ("", "1 file, "), "team-b": ("access-denied", "SignatureDoesNotMatch"),
                "team-c": ("access-denied", "S3 profile 'gone'"),
                "": ("access-denied", "no S3 credentials")}  # local: the default, which is none
    async with running(s):
        for namespace, (reason, text) in expected.items():
            st = await settled(bus, f"{namespace}.imgs" if namespace else "imgs", await add(
                bus, spec("imgs", f"s3://{bucket}/imgs", namespace=namespace)))
            assert st.reason == reason and text in (st.message or st.source), (namespace, st.message)
            assert st.phase == (PHASE.CACHE_PHASE_FAILED if reason else PHASE.CACHE_PHASE_READY)


async def test_narrowed_rules_release_what_a_namespace_may_no_longer_cache(
        bus, nats_server, redis_node, s3_server, s3_keys, tmp_path):
    """The operator takes a bucket away from a namespace and restarts the hydrator: the data
    set cached from it is released (its readers go to the source with their own rights) and
    fails with the reason; the other namespace's data set is untouched, and asking for the
    revoked one again is refused."""
    tier_url = redis_node().url
    bucket_a, bucket_b = s3_server.make_bucket(), s3_server.make_bucket()
    files = write_dataset(tmp_path / "gen", files=3, size=50_000)
    upload(s3_server.client(), bucket_a, "imgs", files)
    files_b = write_dataset(tmp_path / "gen-b", files=2, size=40_000, seed=3)
    upload(s3_server.client(), bucket_b, "imgs", files_b)
    size_a, size_b = (sum(map(len, f.values())) for f in (files, files_b))
    both = f"team-a=s3://{bucket_a},team-b=s3://{bucket_b}"
    s = settings(nats_server.url, tier_url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources=both)
    async with running(s):
        for ns, bucket in (("team-a", bucket_a), ("team-b", bucket_b)):
            st = await settled(bus, f"{ns}.imgs", await add(bus, spec("imgs", f"s3://{bucket}/imgs", namespace=ns)))
            assert st.phase == PHASE.CACHE_PHASE_READY, st.message
    tier = open_tier(tier_url, budget_bytes=1 << 40, prefix="t")
    assert tier.manifest("team-a.imgs") and stored(tier_url) == size_a + size_b

    s = settings(nats_server.url, tier_url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources=f"team-b=s3://{bucket_b}")
    async with running(s):
        revoked = await settled(bus, "team-a.imgs", st_a_request := (await status(bus, "team-a.imgs")).request_id,
                                phases=(PHASE.CACHE_PHASE_FAILED,))
        assert revoked.reason == "path-not-allowed" and revoked.cached_bytes == 0, revoked.message
        assert f"cached under earlier rules, so its {size_a} cached bytes were released" in revoked.message
        assert not tier.manifest("team-a.imgs") and not tier.meta("team-a.imgs")
        assert stored(tier_url) == size_b  # team-b's data set is still there, and ready
        assert (await status(bus, "team-b.imgs")).phase == PHASE.CACHE_PHASE_READY
        again = await settled(bus, "team-a.imgs", await add(
            bus, spec("imgs", f"s3://{bucket_a}/imgs", namespace="team-a")))
        assert (again.phase, again.reason) == (PHASE.CACHE_PHASE_FAILED, "path-not-allowed")
        assert again.request_id != st_a_request and stored(tier_url) == size_b


async def test_a_recorded_source_now_refused_as_malformed_fails_and_the_service_runs_on(
        bus, nats_server, redis_node, s3_server, s3_keys, tmp_path):
    """A data set an older version recorded with a source these rules refuse as malformed
    (an S3 prefix with a '..' segment) fails with the reason at start, instead of stopping the
    service; requests are served."""
    from alnair_common import TypedKV

    bucket = s3_server.make_bucket()
    kv = await TypedKV.open(bus, "cache_datasets", cache_pb2.CacheDatasetStatus)
    await kv.put("team-a.old", cache_pb2.CacheDatasetStatus(
        spec=spec("old", f"s3://{bucket}/a/../b", namespace="team-a"), request_id="r-old",
        phase=PHASE.CACHE_PHASE_READY, cached_bytes=10, files_cached=1))
    s = settings(nats_server.url, redis_node().url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources=f"team-a=s3://{bucket}")
    async with running(s):
        old = await settled(bus, "team-a.old", "r-old", phases=(PHASE.CACHE_PHASE_FAILED,))
        assert old.reason == "invalid-spec" and "'..' segment" in old.message, old.message
        upload(s3_server.client(), bucket, "imgs", write_dataset(tmp_path / "gen", files=1, size=1000))
        new = await settled(bus, "team-a.imgs", await add(
            bus, spec("imgs", f"s3://{bucket}/imgs", namespace="team-a")))
        assert new.phase == PHASE.CACHE_PHASE_READY, new.message
