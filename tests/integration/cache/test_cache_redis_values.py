"""How the Redis tier's client sends values, against a real redis-server and a 3-server Redis
Cluster: a large value goes to the socket from its own buffer (redis-py's packer, not
hiredis' copying one), replies are still parsed by hiredis, and every kind of value comes
back byte for byte."""

from __future__ import annotations

import random

from redis._parsers import _HiredisParser
from redis.cluster import RedisCluster

from alnair_dataset import chunk_id, connect, open_tier
from alnair_dataset._redis_tier import LARGE_VALUE, VALUE_PACKER, ValuePacker

MIB = 1 << 20


def connections(client):
    """One connection of each server the client talks to (taken from and given back to its pools)."""
    pools = ([n.redis_connection.connection_pool for n in client.get_nodes()]
             if isinstance(client, RedisCluster) else [client.connection_pool])
    out = []
    for pool in pools:
        conn = pool.get_connection()
        out.append(conn)
        pool.release(conn)
    return out


def values() -> dict[str, bytes | bytearray | memoryview]:
    rng = random.Random(3)
    big = rng.randbytes(3 * MIB + 7)
    return {
        "empty bytes": b"",
        "empty memoryview": memoryview(b""),
        "one byte": b"\x00",
        "just below the large size": rng.randbytes(LARGE_VALUE - 1),
        "the large size, bytearray": bytearray(rng.randbytes(LARGE_VALUE)),
        "1 MiB + 1, bytes": rng.randbytes(MIB + 1),
        "2 MiB, bytearray": bytearray(rng.randbytes(2 * MIB)),
        "a memoryview into a larger buffer": memoryview(big)[5:5 + 2 * MIB + 3],
        "3 MiB + 7, memoryview": memoryview(big),
        "CRLFs and protocol bytes": b"\r\n$5\r\n*3\r\n" * (LARGE_VALUE // 8),
    }


def test_every_connection_packs_in_place_and_parses_with_hiredis(redis_url):
    client = connect(redis_url)
    try:
        conns = connections(client)
        assert len(conns) == (3 if redis_url.startswith("redis-cluster") else 1)
        for conn in conns:
            assert conn._command_packer is VALUE_PACKER
            assert isinstance(conn._parser, _HiredisParser)
    finally:
        client.close()


def test_a_large_value_is_sent_from_its_own_buffer_and_a_small_command_in_one_piece():
    packer = ValuePacker()
    for value in (bytes(LARGE_VALUE), bytearray(2 * MIB), memoryview(bytes(3 * MIB))):
        pieces = packer.pack("EVALSHA", "f" * 40, 2, "k", "r", "ds", value)
        assert any(piece is value for piece in pieces), type(value).__name__  # not a copy
        assert b"".join(map(bytes, pieces)) == b"".join(map(bytes, packer.small.pack(
            "EVALSHA", "f" * 40, 2, "k", "r", "ds", bytes(value))))  # the same bytes on the wire
    assert packer.pack("HGET", "t:ds:{x}:files", "a/b.jpg") == packer.small.pack(
        "HGET", "t:ds:{x}:files", "a/b.jpg")
    assert len(packer.pack("SET", "k", bytes(LARGE_VALUE - 1))) == 1  # hiredis: one buffer


def test_values_of_every_kind_and_size_round_trip_byte_exactly(redis_url):
    tier = open_tier(redis_url, budget_bytes=1 << 30, prefix="v")
    client = connect(redis_url)
    try:
        for name, value in values().items():
            expected = bytes(value)
            cid = chunk_id(expected)
            tier.put_chunk("ds", cid, value)
            assert tier.get_chunks([cid]) == [expected], name  # through the store script
            client.set(f"v:raw:{name}", value)
            assert client.get(f"v:raw:{name}") == expected, name  # a plain SET
            pipe = client.pipeline(transaction=False)
            pipe.set(f"v:raw:{name}", value)
            pipe.get(f"v:raw:{name}")
            assert pipe.execute() == [True, expected], name  # a pipeline's packing
        distinct = {chunk_id(bytes(v)): len(v) for v in values().values()}
        assert tier.usage().stored_bytes == sum(distinct.values())
    finally:
        client.close()
        tier.close()
