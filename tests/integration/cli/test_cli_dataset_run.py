"""The README's data set steps as a newcomer runs them: `alnair up`, `alnair dataset add` of a
local directory and of an S3 prefix (real versitygw), and `alnair run --dataset` of unchanged
reading code, which then reads every file through the cache (real platform, subprocesses);
and `alnair dataset serve-s3` for plain boto3 code; a name no data set can have refused with
the reason by every command."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ALNAIR, running_platform

from alnair_common.natsd import free_port

READER = """
import hashlib, json
from alnair_dataset import DatasetReader
with DatasetReader() as reader:
    digests = {p: hashlib.sha256(reader.read(p)).hexdigest() for p in reader.files()}
    print(json.dumps({"name": reader.name, "digests": digests, "hits": reader.stats.hits,
                      "misses": reader.stats.misses}))
"""


@pytest.mark.timeout(300)
def test_a_run_with_dataset_reads_it_through_the_cache(tmp_path: Path, s3_server,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "data" / "mnist"
    source.mkdir(parents=True)
    files = {f"part-{i}.bin": os.urandom(50_000 + i) for i in range(3)}
    for name, data in files.items():
        (source / name).write_bytes(data)
    bucket = s3_server.make_bucket()
    for name, data in files.items():
        s3_server.client().put_object(Bucket=bucket, Key=f"mnist/{name}", Body=data)
    (tmp_path / "reader.py").write_text(READER)
    # The S3 endpoint and keys as a user exports them, for the platform and the workload alike.
    s3_env = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": s3_server.access_key,
              "AWS_SECRET_ACCESS_KEY": s3_server.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in s3_env.items():  # the shell `alnair run` starts from
        monkeypatch.setenv(key, value)
    with running_platform(tmp_path, "--gpus", "sim:1x8", env=s3_env) as data_dir:
        def alnair(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*ALNAIR, *args, "--data-dir", str(data_dir)] if args[0] != "run"
                                  else [*ALNAIR, "run", "--data-dir", str(data_dir), *args[1:]],
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)

        # No ALNAIR_CACHE_ALLOWED_ROOTS: on a workstation any directory the user reads will do.
        added = alnair("dataset", "add", "mnist", f"file://{source}")
        assert added.returncode == 0 and "mnist: ready" in added.stdout, added.stdout + added.stderr
        added = alnair("dataset", "add", "mnist-s3", f"s3://{bucket}/mnist")
        assert added.returncode == 0 and "mnist-s3: ready" in added.stdout, added.stdout + added.stderr
        # A name no data set can have is refused by every command that takes one, saying why.
        for refused in (alnair("dataset", "add", "Bad Name!", f"file://{source}"),
                        alnair("dataset", "rm", "Bad Name!"),
                        alnair("run", "--dataset", "mnist s3", "--gpu-memory", "1", "--", "true")):
            assert refused.returncode != 0, refused.stdout
            said = " ".join(refused.stderr.split())  # as one line: the terminal may wrap it
            assert "is not valid: 1 to 63 letters, digits, '-' or '_'" in said, said
            assert "Traceback" not in said and "bytes" not in said, said  # no progress bar either
        runs = {name: alnair("run", "--dataset", name, "--name", f"reader-{name}", "--gpu-memory", "1",
                             "--", sys.executable, "reader.py") for name in ("mnist", "mnist-s3")}
        # boto3 code that names no endpoint, pointed at `alnair dataset serve-s3` by the variable.
        port = free_port()
        gateway = subprocess.Popen([*ALNAIR, "dataset", "serve-s3", "mnist-s3", "--listen", f"127.0.0.1:{port}",
                                    "--data-dir", str(data_dir)], stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONFAULTHANDLER": "1"})  # stacks on SIGABRT
        try:
            boto_env = {**os.environ, "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}
            boto_env.pop("AWS_ENDPOINT_URL")  # the gateway, not the source, is what the code sees
            code = (f"import boto3, hashlib, json, time\nc = boto3.client('s3')\n"
                    f"for _ in range(100):\n    try:\n        keys = [o['Key'] for o in c.list_objects_v2("
                    f"Bucket='{bucket}', Prefix='mnist/')['Contents']]; break\n"
                    f"    except Exception: time.sleep(0.2)\n"
                    f"print(json.dumps({{k: hashlib.sha256(c.get_object(Bucket='{bucket}', Key=k)['Body']"
                    f".read()).hexdigest() for k in keys}}))\n")
            boto = subprocess.run([sys.executable, "-c", code], env=boto_env, capture_output=True, text=True,
                                  timeout=60)
        finally:
            gateway.send_signal(signal.SIGINT)
            try:
                _, gateway_err = gateway.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # say where it hung (SIGINT ignored, before the gateway handled it)
                gateway.send_signal(signal.SIGABRT)
                _, gateway_err = gateway.communicate(timeout=30)
                pytest.fail(f"serve-s3 did not stop within 30 s of Ctrl-C; its threads:\n{gateway_err[-6000:]}")
        assert boto.returncode == 0, boto.stderr + gateway_err
        assert json.loads(boto.stdout) == {f"mnist/{p}": hashlib.sha256(d).hexdigest() for p, d in files.items()}
        assert f"serving s3://{bucket}/mnist/ (data set mnist-s3)" in gateway_err
    for name, run in runs.items():
        assert run.returncode == 0, run.stdout + run.stderr
        read = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
        assert read["name"] == name
        assert read["digests"] == {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}
        assert (read["hits"], read["misses"]) == (len(files), 0), name
