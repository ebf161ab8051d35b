"""The read-only FUSE mount with real FUSE, over real redis-server and the directory tier:
plain open/stat/listdir/pread through the mount return the source's bytes whether the data
set is cached, half-cached or not, and go on from the source when Redis dies.

Needs /dev/fuse and the right to mount; where either is missing every test that mounts
skips saying so (a gap to report, not a pass). The bad-input tests mount nothing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from cache_support import MIB, hydrate_directly, write_dataset

from alnair_dataset import MountError, is_mounted, open_tier, spawn_mount, unmount

MOUNT = [sys.executable, "-c", "import sys; from alnair_dataset import _mount; sys.exit(_mount.main())"]


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path, monkeypatch):
    """A background mount logs to the temporary directory (alnair-mount-<path>.log, kept after
    its unmount, as a daemon's log is): this module's go to the test's own, not to /tmp."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))


@pytest.fixture(params=["redis", "directory"])
def tier_url(request, tmp_path):
    if request.param == "directory":
        return f"dir://{tmp_path}/tier"
    return request.getfixturevalue("redis_node")().url


@pytest.fixture
def data(tmp_path):
    files = write_dataset(tmp_path / "src", files=4, size=2 * MIB + 333)  # shards over chunks
    files.update(write_dataset(tmp_path / "src", files=20, size=5000, sub="small/jpg", seed=2))
    (tmp_path / "src" / "empty.bin").write_bytes(b"")
    files["empty.bin"] = b""
    return tmp_path / "src", files


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@contextlib.contextmanager
def mounted(tmp_path: Path, names: str, *args: str):
    """The mount as its own process (``--foreground``); on exit unmount it and check that
    neither the mount nor the process is left."""
    mnt = tmp_path / f"mnt-{names.replace(',', '-')}"
    mnt.mkdir()
    log_path = tmp_path / f"mount-{names}.log"
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen([*MOUNT, names, str(mnt), "--prefix", "t", "--foreground", *args],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not is_mounted(mnt):
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "not mounted within 30 s"
                time.sleep(0.05)
            yield mnt, log
        finally:
            if is_mounted(mnt):
                unmount(mnt)
            elif proc.poll() is None:
                proc.kill()
            assert proc.wait(30) == 0, log_path.read_text()
    assert str(mnt) not in Path("/proc/mounts").read_text()
    assert os.listdir(mnt) == []


def _check_tree(mnt: Path, files: dict[str, bytes]) -> None:
    walked = {str(Path(d, f).relative_to(mnt)) for d, _, fs in os.walk(mnt) for f in fs}
    assert walked == set(files)
    assert sorted(os.listdir(mnt)) == ["empty.bin", "small", "train"]
    assert sorted(os.listdir(mnt / "small" / "jpg")) == sorted(
        p.rsplit("/", 1)[1] for p in files if p.startswith("small/jpg/"))
    top = os.stat(mnt / "train")
    assert stat.S_ISDIR(top.st_mode) and stat.S_IMODE(top.st_mode) == 0o555
    for rel, want in files.items():
        st = os.stat(mnt / rel)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444
        assert st.st_size == len(want) and abs(st.st_mtime - time.time()) < 3600


def _check_bytes(mnt: Path, files: dict[str, bytes], seed: int) -> None:
    for rel, want in files.items():
        with open(mnt / rel, "rb") as f:
            assert f.read() == want, rel
    shard = "train/part-001.bin"
    assert np.fromfile(mnt / shard, dtype=np.uint8).tobytes() == files[shard]
    rng = random.Random(seed)
    for rel in rng.sample(sorted(files), 10):  # ranges across chunk (1 MiB) boundaries
        fd = os.open(mnt / rel, os.O_RDONLY)
        try:
            for _ in range(5):
                size = len(files[rel])
                a = rng.randrange(0, size + 1)
                n = rng.randrange(0, 3 * MIB)
                assert os.pread(fd, n, a) == files[rel][a:a + n], (rel, a, n)
        finally:
            os.close(fd)


@pytest.mark.parametrize("state", ["cached", "half", "not-cached"])
def test_every_byte_through_the_mount_equals_the_source_in_every_state(fuse_ok, tier_url, data,
                                                                     tmp_path, state):
    root, files = data
    only = {"cached": None, "half": 12, "not-cached": 0}[state]
    hydrate_directly(open_tier(tier_url, budget_bytes=1 << 40, prefix="t"), "ds",
                     f"file://{root}", only=only, phase="ready" if state == "cached" else "hydrating")
    with mounted(tmp_path, "ds", "--tier-url", tier_url) as (mnt, _):
        _check_tree(mnt, files)
        _check_bytes(mnt, files, seed=7)
        _check_bytes(mnt, files, seed=8)  # a second epoch: misses were written back meanwhile
        # what the mount missed it wrote back, as the reader does (an empty file needs no chunk)
        deadline = time.monotonic() + 30
        tier = open_tier(tier_url, budget_bytes=1 << 40, prefix="t")
        while not set(files) - {"empty.bin"} <= set(tier.manifest("ds")):
            assert time.monotonic() < deadline, sorted(tier.manifest("ds"))
            time.sleep(0.1)


def test_an_unchanged_reader_in_another_process_reads_through_the_mount(fuse_ok, data, tmp_path):
    root, files = data
    url = f"dir://{tmp_path}/tier"
    hydrate_directly(open_tier(url, budget_bytes=1 << 40, prefix="t"), "ds", f"file://{root}",
                     only=10, phase="hydrating")
    reader = ("import hashlib, json, os, sys\n"
              "root = sys.argv[1]\n"
              "out = {}\n"
              "for d, _, fs in os.walk(root):\n"
              "    for f in fs:\n"
              "        p = os.path.join(d, f)\n"
              "        out[os.path.relpath(p, root)] = hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
              "print(json.dumps(out))\n")
    with mounted(tmp_path, "ds", "--tier-url", url) as (mnt, _):
        done = subprocess.run([sys.executable, "-c", reader, str(mnt)], capture_output=True,
                              text=True, timeout=60, env={"PATH": os.environ["PATH"]})
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}


def test_killing_the_redis_server_mid_read_goes_on_from_the_source(fuse_ok, redis_node, data,
                                                                  tmp_path):
    root, files = data
    node = redis_node()
    hydrate_directly(open_tier(node.url, budget_bytes=1 << 40, prefix="t"), "ds", f"file://{root}")
    paths = sorted(files)
    with mounted(tmp_path, "ds", "--tier-url", node.url) as (mnt, _):
        big = open(mnt / "train/part-002.bin", "rb")  # noqa: SIM115
        try:
            head = big.read(MIB + 5)  # open across the kill
            for rel in paths[:8]:
                assert (mnt / rel).read_bytes() == files[rel]
            node.kill()
            assert head + big.read() == files["train/part-002.bin"]
        finally:
            big.close()
        for rel in paths[8:]:
            assert (mnt / rel).read_bytes() == files[rel], rel
        _check_bytes(mnt, files, seed=9)


def test_a_file_neither_tier_nor_source_has_reads_as_eio_with_a_log_line(fuse_ok, data, tmp_path):
    root, files = data
    url = f"dir://{tmp_path}/tier"
    hydrate_directly(open_tier(url, budget_bytes=1 << 40, prefix="t"), "ds", f"file://{root}",
                     only=0, phase="hydrating")
    with mounted(tmp_path, "ds", "--tier-url", url) as (mnt, log):
        (root / "small/jpg/part-003.bin").unlink()  # listed, not cached, gone from the source
        with pytest.raises(OSError) as raised:
            (mnt / "small/jpg/part-003.bin").read_bytes()
        assert raised.value.errno == errno.EIO
        assert (mnt / "small/jpg/part-004.bin").read_bytes() == files["small/jpg/part-004.bin"]
        log.flush()
        text = (tmp_path / "mount-ds.log").read_text()
    assert "small/jpg/part-003.bin" in text and "failed from tier and source" in text


def test_writes_are_refused_and_unknown_paths_are_enoent(fuse_ok, data, tmp_path):
    root, files = data
    with mounted(tmp_path, "ds", "--source", f"file://{root}") as (mnt, _):
        refused = [
            lambda: open(mnt / "new.bin", "wb"),
            lambda: open(mnt / "empty.bin", "ab"),
            lambda: open(mnt / "train/part-000.bin", "r+b"),
            lambda: os.mkdir(mnt / "d"),
            lambda: os.unlink(mnt / "empty.bin"),
            lambda: os.rename(mnt / "empty.bin", mnt / "moved.bin"),
            lambda: os.chmod(mnt / "empty.bin", 0o666),
            lambda: os.truncate(mnt / "train/part-000.bin", 0),
            lambda: os.symlink("empty.bin", mnt / "link"),
        ]
        for attempt in refused:
            with pytest.raises(OSError) as raised:
                attempt()
            assert raised.value.errno == errno.EROFS
        with pytest.raises(FileNotFoundError):
            os.stat(mnt / "train/nope.bin")
        with pytest.raises(FileNotFoundError):
            open(mnt / "nope/part-000.bin", "rb")
        with pytest.raises(IsADirectoryError):
            open(mnt / "train", "rb")
        with pytest.raises(NotADirectoryError):
            os.listdir(mnt / "empty.bin")
        assert sorted(os.listdir(root)) == ["empty.bin", "small", "train"]  # source untouched
        assert os.statvfs(mnt).f_files == len(files)


def test_several_data_sets_mount_one_directory_each(fuse_ok, tmp_path):
    a = write_dataset(tmp_path / "a", files=2, size=MIB + 1)
    b = write_dataset(tmp_path / "b", files=3, size=999, sub="val", seed=4)
    env = {"ALNAIR_DATASET_ALPHA_SOURCE": f"file://{tmp_path}/a",
           "ALNAIR_DATASET_BETA_SOURCE": f"file://{tmp_path}/b"}
    os.environ.update(env)
    try:
        with mounted(tmp_path, "alpha,beta") as (mnt, _):
            assert sorted(os.listdir(mnt)) == ["alpha", "beta"]
            for name, files in (("alpha", a), ("beta", b)):
                for rel, want in files.items():
                    assert (mnt / name / rel).read_bytes() == want
    finally:
        for key in env:
            del os.environ[key]


def test_background_mount_and_unmount_leave_nothing_behind(fuse_ok, data, tmp_path):
    root, files = data
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run([*MOUNT, "ds", str(mnt), "--source", f"file://{root}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split("(pid ")[1].split(",")[0])
    assert _alive(pid) and is_mounted(mnt)
    assert (mnt / "train/part-003.bin").read_bytes() == files["train/part-003.bin"]
    with pytest.raises(MountError, match="already a mount point"):
        spawn_mount(["ds"], mnt, source=f"file://{root}")
    unmount(mnt)
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, f"mount process {pid} still running after unmount"
        time.sleep(0.05)
    assert not is_mounted(mnt) and str(mnt) not in Path("/proc/mounts").read_text()
    with pytest.raises(MountError, match="is not a mount point"):
        unmount(mnt)


# -- bad input: nothing mounts, so no FUSE needed ---------------------------------------------


def _mount_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MOUNT, *args], capture_output=True, text=True, timeout=60)


def test_bad_mount_points_and_data_sets_are_refused_with_a_reason(tmp_path):
    src = tmp_path / "src"
    write_dataset(src, files=1, size=10)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_bytes(b"")
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    cases = [
        (("ds", str(tmp_path / "missing"), "--source", f"file://{src}"), "does not exist"),
        (("ds", str(tmp_path / "file"), "--source", f"file://{src}"), "is not a directory"),
        (("ds", str(tmp_path / "full"), "--source", f"file://{src}"), "is not empty"),
        (("ds", str(tmp_path / "empty"), "--foreground", "--tier-url", f"dir://{tmp_path}/t"),
         "the tier does not know it and no source was given"),
        (("a,b", str(tmp_path / "empty"), "--source", f"file://{src}"),
         "--source names one data set's source"),
        (("ds", str(tmp_path / "empty"), "--foreground", "--source", "ftp://x/y"),
         "the scheme must be s3:// or file://"),
    ]
    for args, reason in cases:
        done = _mount_cli(*args)
        assert done.returncode == 2 and reason in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert os.listdir(tmp_path / "empty") == [] and not is_mounted(tmp_path / "empty")
    with pytest.raises(MountError, match="is not a mount point"):
        unmount(tmp_path / "empty")


def test_alnair_dataset_mount_in_local_mode_reads_the_platforms_tier(fuse_ok, nats_server,
                                                                     tmp_path):
    """`alnair dataset add` through the hydrator, then `alnair dataset mount --background`:
    the mount reads the tier the hydrator filled (no miss), `umount` removes it."""
    from test_cache_cli import alnair

    files = write_dataset(tmp_path / "data" / "mnist", files=3, size=MIB + 7)
    home = tmp_path / "home"
    env = {**os.environ, "ALNAIR_NATS_URL": nats_server.url, "ALNAIR_HOME": str(home),
           "ALNAIR_CACHE_PREFIX": "t", "ALNAIR_CACHE_ALLOWED_ROOTS": str(tmp_path / "data"),
           "ALNAIR_DATA_DIR": str(home), "ALNAIR_LOG_FORMAT": "console", "COLUMNS": "200"}
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with open(tmp_path / "hydrator.log", "ab") as log:
        hydrator = subprocess.Popen([sys.executable, "-m", "alnair_cache_hydrator"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
    try:
        added = alnair("dataset", "add", "mnist", f"file://{tmp_path}/data/mnist", env=env)
        assert added.returncode == 0, added.stderr
        unknown = alnair("dataset", "mount", "nope", str(mnt), env=env)
        assert unknown.returncode == 2 and "no such data set" in unknown.stderr
        done = alnair("dataset", "mount", "mnist", str(mnt), "--background", env=env)
        assert done.returncode == 0, done.stderr
        assert "mnist: mounted on" in done.stdout and is_mounted(mnt)
        pid = int(done.stdout.split("(pid ")[1].split(",")[0])
        try:
            # the source gone before anything is read: every byte comes from the tier the
            # hydrator filled under the data directory
            for rel in files:
                (tmp_path / "data" / "mnist" / rel).unlink()
            assert {str(p.relative_to(mnt)): p.read_bytes()
                    for p in mnt.rglob("*") if p.is_file()} == files
        finally:
            gone = alnair("dataset", "umount", str(mnt), env=env)
        assert gone.returncode == 0, gone.stderr
        assert not is_mounted(mnt)
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, f"mount process {pid} left running"
            time.sleep(0.05)
        again = alnair("dataset", "umount", str(mnt), env=env)
        assert again.returncode == 2 and "is not a mount point" in again.stderr

        # in the foreground until interrupted: Ctrl-C unmounts and exits 0 — also when started
        # with SIGINT ignored, as a shell script's background job is (libfuse installs its
        # handler only over the default disposition; the binding resets it to the default)
        from test_cache_cli import ALNAIR

        front = subprocess.Popen([*ALNAIR, "dataset", "mount", "mnist", str(mnt)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert front.poll() is None and time.monotonic() < deadline, front.communicate()
            time.sleep(0.05)
        assert (mnt / "train/part-002.bin").read_bytes() == files["train/part-002.bin"]
        front.send_signal(signal.SIGINT)
        _, stderr = front.communicate(timeout=30)
        assert front.returncode == 0, stderr
        assert "Ctrl-C to unmount" in stderr and not is_mounted(mnt)
    finally:
        hydrator.terminate()
        hydrator.wait(15)
