"""The per-namespace tier credential: derived the same by the hydrator and the webhook."""

from __future__ import annotations

import pytest

from alnair_common.tier_readers import has_users, reader_password, reader_url, reader_user

KEY = "k" * 32


def test_each_namespace_and_key_gives_its_own_password_and_the_same_one_every_time():
    a = reader_password(KEY, "team-a")
    assert a == reader_password(KEY, "team-a")
    assert a != reader_password(KEY, "team-b")
    assert a != reader_password("j" * 32, "team-a")
    assert len(a) == 64 and int(a, 16) >= 0


@pytest.mark.parametrize("url", [
    "redis://alnair-redis:6379/0",
    "redis://:admin-password@alnair-redis:6379/0",
    "redis-cluster://:admin@alnair-redis-0.alnair-redis:6379,alnair-redis-1.alnair-redis:6379",
    "rediss://someone:pw@redis.example:6380",
])
def test_the_reader_url_replaces_any_credential_and_keeps_the_hosts(url):
    got = reader_url(url, KEY, "team-a")
    scheme, rest = got.split("://")
    assert scheme == url.split("://")[0]
    credential, hosts = rest.split("@")
    assert credential == f"alnair-reader-team-a:{reader_password(KEY, 'team-a')}"
    assert hosts == url.split("://")[1].rpartition("@")[2]
    assert "admin" not in got


@pytest.mark.parametrize(("namespace", "says"), [
    ("Team", "not a Kubernetes namespace"), ("a.b", "not a Kubernetes namespace"),
    ("", "not a Kubernetes namespace"), ("-a", "not a Kubernetes namespace"),
    ("a*", "not a Kubernetes namespace"), ("x" * 64, "not a Kubernetes namespace"),
])
def test_a_name_that_is_not_a_namespace_gets_no_user(namespace, says):
    with pytest.raises(ValueError, match=says):
        reader_user(namespace)


def test_tiers_without_users_and_short_keys_are_refused():
    assert has_users("redis-cluster://h:1") and not has_users("dir:///cache")
    assert not has_users("alluxio://proxy:39999/alnair")
    with pytest.raises(ValueError, match="has no users"):
        reader_url("alluxio://proxy:39999/alnair", KEY, "team-a")
    with pytest.raises(ValueError, match="at least 16"):
        reader_password("short", "team-a")


@pytest.mark.parametrize("settings_class", ["cache_hydrator", "admission_webhook", "dataset_csi"])
def test_every_holder_of_the_key_refuses_a_short_one_at_start(settings_class):
    import importlib

    from alnair_common import ConfigError, load_settings

    module = importlib.import_module(f"alnair_{settings_class}")
    cls = next(getattr(module, n) for n in dir(module) if n.endswith("Settings"))
    with pytest.raises(ConfigError, match=r"ALNAIR_CACHE_READER_KEY=.*at least 16"):
        load_settings(cls, cache_reader_key="short")
    assert load_settings(cls, cache_reader_key=KEY).cache_reader_key.get_secret_value() == KEY
    assert load_settings(cls).cache_reader_key.get_secret_value() == ""
