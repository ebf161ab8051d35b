"""The ``mongo`` fixture is a real MongoDB-wire server (FerretDB): pymongo's upserts,
queries and indexes round-trip, and a unique index is enforced by the server."""

from __future__ import annotations

import pymongo
import pytest
from pymongo.errors import DuplicateKeyError

from alnair_common.testing.mongo import MongoDatabase


def test_upsert_find_and_index_round_trip(mongo: MongoDatabase) -> None:
    profiles = mongo.db["profiles"]

    first = profiles.update_one({"_id": "ns/train-0"},
                                {"$set": {"node": "gpu-1", "peak_memory_bytes": 6 << 30}},
                                upsert=True)
    second = profiles.update_one({"_id": "ns/train-0"},
                                 {"$set": {"peak_memory_bytes": 7 << 30}}, upsert=True)
    profiles.insert_many([{"_id": f"ns/eval-{i}", "node": "gpu-2",
                           "peak_memory_bytes": i << 30} for i in range(3)])

    assert first.upserted_id == "ns/train-0"
    assert (second.matched_count, second.modified_count, second.upserted_id) == (1, 1, None)
    assert profiles.find_one({"_id": "ns/train-0"}) == {
        "_id": "ns/train-0", "node": "gpu-1", "peak_memory_bytes": 7 << 30}
    on_gpu2 = profiles.find({"node": "gpu-2"}, sort=[("peak_memory_bytes", -1)])
    assert [doc["_id"] for doc in on_gpu2] == ["ns/eval-2", "ns/eval-1", "ns/eval-0"]

    name = profiles.create_index([("node", pymongo.ASCENDING),
                                  ("peak_memory_bytes", pymongo.DESCENDING)])
    assert name in profiles.index_information()


def test_unique_index_is_enforced_by_the_server(mongo: MongoDatabase) -> None:
    jobs = mongo.db["jobs"]
    jobs.create_index("uid", unique=True)
    jobs.insert_one({"uid": "a1", "state": "Running"})

    with pytest.raises(DuplicateKeyError):
        jobs.insert_one({"uid": "a1", "state": "Pending"})
    assert jobs.count_documents({}) == 1


def test_each_test_gets_a_fresh_database(mongo: MongoDatabase) -> None:
    assert mongo.db.list_collection_names() == []
    assert mongo.url.endswith(f"/{mongo.name}")
    with pymongo.MongoClient(mongo.url) as other:  # the URL alone reaches the same data
        other.get_default_database()["c"].insert_one({"x": 1})
    assert mongo.db["c"].count_documents({"x": 1}) == 1
