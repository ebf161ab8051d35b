"""`alnair dataset ...` with any arguments and no platform: a reason and a non-zero exit."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from alnair.v1 import cache_pb2
from alnair_cli.__main__ import app
from alnair_cli._dataset import DatasetRunRequest, dataset_environment
from alnair_cli._run import RunRequest

DATA_DIR = Path(tempfile.mkdtemp(prefix="alnair-dataset-fuzz-"))
atexit.register(shutil.rmtree, DATA_DIR, ignore_errors=True)  # made at import: no fixture
WORDS = st.one_of(
    st.sampled_from(["add", "ls", "rm", "--include", "--exclude", "--pin", "--detach",
                     "--timeout", "--json", "s3://b/p", "file:///data", "http://x", "", "-1",
                     "--bogus", "imagenet"]),
    st.text(max_size=12))


@settings(max_examples=150, deadline=None)
@given(args=st.lists(WORDS, max_size=5))
def test_dataset_commands_refuse_cleanly_without_a_platform(args):
    result = CliRunner().invoke(app, ["dataset", *args],
                                env={"ALNAIR_HOME": str(DATA_DIR), "ALNAIR_NATS_URL": ""})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    if "--help" not in args and args[:1] != [] and args[0] in ("add", "ls", "rm"):
        assert result.exit_code != 0 and result.output.strip()


def test_run_with_a_dataset_hands_the_reader_its_variables(monkeypatch):
    monkeypatch.setenv("ALNAIR_CACHE_TIER_URL", "redis://10.0.0.5:6380/0")
    monkeypatch.setenv("ALNAIR_SECRET_OF_THE_PLATFORM", "x")
    base = RunRequest.build(["python", "train.py"], 8, 30, None)
    status = cache_pb2.CacheDatasetStatus(dataset="imagenet", source="s3://b/imagenet")
    request = DatasetRunRequest(base.command, base.memory_gib, base.compute_percent, base.name,
                                base.uid, dataset_environment(status, Path("/home/u/.alnair")))
    env = request.environment()
    assert env["ALNAIR_DATASET"] == "imagenet" and env["ALNAIR_DATASET_SOURCE"] == "s3://b/imagenet"
    assert env["ALNAIR_CACHE_TIER_URL"] == "redis://10.0.0.5:6380/0"
    assert "ALNAIR_SECRET_OF_THE_PLATFORM" not in env  # the rest of ALNAIR_* still stays home
    monkeypatch.delenv("ALNAIR_CACHE_TIER_URL")
    local = dataset_environment(status, Path("/home/u/.alnair"))
    assert local["ALNAIR_CACHE_TIER_URL"] == "dir:///home/u/.alnair/cache"  # the hydrator's default
