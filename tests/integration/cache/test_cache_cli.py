"""`alnair dataset add/ls/rm` against a running cache hydrator (subprocesses, real servers)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from cache_support import write_dataset

from alnair.v1 import cache_pb2
from alnair_cli._dataset import dataset_environment
from alnair_common import ensure_streams
from alnair_dataset import DatasetReader

ALNAIR = [sys.executable, "-m", "alnair_cli"]


def alnair(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ALNAIR, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_add_ls_rm_through_the_hydrator_in_local_mode(nats_server, tmp_path):
    """No tier configured: the hydrator uses the directory tier under the data directory, as
    under `alnair up`, and a reader given what `alnair run --dataset` hands out reads it."""
    files = write_dataset(tmp_path / "data" / "mnist", files=4)
    home = tmp_path / "home"
    env = {**os.environ, "ALNAIR_NATS_URL": nats_server.url, "ALNAIR_HOME": str(home),
           "ALNAIR_CACHE_PREFIX": "t", "ALNAIR_CACHE_ALLOWED_ROOTS": str(tmp_path / "data"),
           "ALNAIR_DATA_DIR": str(home),
           "ALNAIR_LOG_FORMAT": "console", "COLUMNS": "200"}
    with open(tmp_path / "hydrator.log", "ab") as log:
        hydrator = subprocess.Popen([sys.executable, "-m", "alnair_cache_hydrator"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
    try:
        added = alnair("dataset", "add", "mnist", f"file://{tmp_path}/data/mnist", env=env)
        assert added.returncode == 0, added.stderr
        assert "mnist: ready" in added.stdout

        listed = json.loads(alnair("dataset", "ls", "--json", env=env).stdout)
        assert [(d["name"], d["phase"], d["files_cached"], d["cached_bytes"]) for d in listed] == [
            ("mnist", "ready", 4, sum(map(len, files.values())))]
        table = alnair("dataset", "ls", env=env).stdout
        assert "mnist" in table and "100%" in table
        status = cache_pb2.CacheDatasetStatus(dataset="mnist", source=listed[0]["source"])
        handed = dataset_environment(status, home)
        assert handed["ALNAIR_CACHE_TIER_URL"] == f"dir://{home.resolve()}/cache"
        with DatasetReader(handed["ALNAIR_DATASET"], tier_url=handed["ALNAIR_CACHE_TIER_URL"],
                           prefix="t") as reader:
            assert {p: reader.read(p) for p in reader.files()} == files
            assert reader.stats.misses == 0

        clash = alnair("dataset", "add", "mnist", "s3://elsewhere/mnist", env=env)
        assert clash.returncode == 2 and "already exists with other data" in clash.stderr
        outside = alnair("dataset", "add", "etc", "file:///etc", env=env)
        assert outside.returncode == 1 and "path-not-allowed" in outside.stderr

        assert alnair("dataset", "rm", "mnist", env=env).returncode == 0
        assert alnair("dataset", "rm", "etc", env=env).returncode == 0
        assert json.loads(alnair("dataset", "ls", "--json", env=env).stdout) == []
        missing = alnair("dataset", "rm", "mnist", env=env)
        assert missing.returncode == 2 and "no data set 'mnist'" in missing.stderr
    finally:
        hydrator.terminate()
        hydrator.wait(15)


async def test_add_says_when_no_hydrator_answers(bus, nats_server, tmp_path):
    await ensure_streams(bus)  # a platform whose hydrator is down
    env = {**os.environ, "ALNAIR_NATS_URL": nats_server.url, "ALNAIR_HOME": str(tmp_path)}
    result = await asyncio.to_thread(alnair, "dataset", "add", "x", "s3://b/p", "--timeout", "2",
                                     env=env)
    assert result.returncode == 1 and "did not answer within 2 s" in result.stderr
