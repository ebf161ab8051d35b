"""The ``redis`` fixture is a real redis-server with the deployment's eviction policy."""

from __future__ import annotations

from alnair_common.testing.redis import EVICTION_POLICY, RedisDatabase


def test_set_get_with_expiry(redis: RedisDatabase) -> None:
    key = f"{redis.prefix}cache:imagenet:shard-7"
    assert redis.client.set(key, "node-3", ex=60)
    assert redis.client.get(key) == "node-3"
    assert 0 < redis.client.ttl(key) <= 60
    assert redis.client.dbsize() == 1  # the test's database started empty


def test_eviction_policy_is_configured_and_evicts(redis: RedisDatabase) -> None:
    client = redis.client
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": EVICTION_POLICY}
    assert int(client.config_get("maxmemory")["maxmemory"]) > 0

    # Shrink the ceiling for a moment and overfill it: the server must evict, not refuse.
    original = client.config_get("maxmemory")["maxmemory"]
    evicted_before = int(client.info("stats")["evicted_keys"])
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used + 2 * 2**20))
    try:
        value = "x" * 10_000
        with client.pipeline(transaction=False) as pipe:
            for i in range(1_000):  # ~10 MB into a ~2 MB headroom
                pipe.set(f"{redis.prefix}blob:{i}", value)
            pipe.execute()
        assert int(client.info("stats")["evicted_keys"]) > evicted_before
        assert client.dbsize() < 1_000
    finally:
        client.config_set("maxmemory", original)
