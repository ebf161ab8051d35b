"""A read-only FUSE mount of cached data sets: unchanged code that opens ``/data/x.jpg`` reads
through the cache (issue #17's transparent switch for POSIX readers).

One data set mounts as its file tree; several (``imagenet,coco``) as one directory each.
Every read goes through :meth:`DatasetReader.read` by byte range, so a mount serves a data
set that is cached, half-cached or not cached, and goes on from the source when the tier
dies. Never writable: the mount is ``ro`` and every write path answers EROFS. Errors are
errnos: ENOENT for a path the data set does not have, EIO (with a log line) when tier and
source both fail.

The binding is **mfusepy** (ISC): ctypes over libfuse, so no C build and no compiler in a
training image; it is the maintained fork of fusepy (fusepy is unmaintained since 2019) and
loads libfuse 2 where present, else libfuse 3. pyfuse3 was not chosen: LGPL, a C extension
to build, and trio in the reading path. mfusepy is imported only when mounting: importing
it fails on a machine without libfuse, and ``alnair_dataset`` must import everywhere.

libfuse runs in the foreground of its process, always: its daemon mode forks after the
readers' threads (prefetch, lease renewal) started, and a forked copy keeps none of them.
"In the background" is therefore a child process started by :func:`spawn_mount`, which
returns once the kernel lists the mount.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._chunking import CHUNK_BYTES
from ._errors import DatasetError
from ._reader import ENV_DATASET, ENV_DATASETS, DatasetReader

log = logging.getLogger("alnair_dataset.mount")

FUSE_DEVICE = "/dev/fuse"
BLOCK_BYTES = CHUNK_BYTES
"""What one miss of an open file fetches: one tier chunk, so a 128 KiB kernel read does not
fetch the same chunk eight times. A file smaller than this is read whole, which is also
what lets a miss be written back."""
BLOCKS_PER_FILE = 2  # an open file keeps its last two blocks (reads straddling one boundary)


class MountError(DatasetError):
    """A mount cannot be made or removed: the message says what is wrong and what to do."""

    reason = "mount-error"


# -- the filesystem --------------------------------------------------------------------------


@dataclass
class _OpenFile:
    reader: DatasetReader
    path: str
    size: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    blocks: OrderedDict[int, bytes] = field(default_factory=OrderedDict)

    def block(self, start: int) -> bytes:
        with self.lock:
            data = self.blocks.get(start)
            if data is not None:
                self.blocks.move_to_end(start)
                return data
        data = self.reader.read(self.path, start, min(start + BLOCK_BYTES, self.size))
        with self.lock:
            self.blocks[start] = data
            while len(self.blocks) > BLOCKS_PER_FILE:
                self.blocks.popitem(last=False)
        return data


def _erofs(*_args: Any, **_kwargs: Any) -> None:
    raise OSError(errno.EROFS, "alnair data sets are read-only")


class DatasetOperations:
    """The FUSE operations over ``readers`` (mount path -> reader; "" for a single data set
    at the root). Paths are FUSE's: absolute, ``/`` the mount's root."""

    use_ns = True  # times as integer nanoseconds (mfusepy's float seconds are deprecated)

    def __init__(self, readers: Mapping[str, DatasetReader]) -> None:
        self.readers = dict(readers)
        self._files: dict[str, tuple[DatasetReader, str, int]] = {}
        self._dirs: dict[str, set[str]] = {"/": set()}
        for top, reader in self.readers.items():
            for rel in reader.files():
                self._add(f"/{top}/{rel}" if top else f"/{rel}", (reader, rel, reader.size(rel)))
            if top:
                self._dirs["/"].add(top)
                self._dirs.setdefault(f"/{top}", set())
        self._listing = {d: [".", "..", *sorted(names)] for d, names in self._dirs.items()}
        self._open: dict[int, _OpenFile] = {}
        self._next_fh = 1
        self._lock = threading.Lock()
        self._time = time.time_ns()
        self._uid, self._gid = os.getuid(), os.getgid()

    def _add(self, full: str, file: tuple[DatasetReader, str, int]) -> None:
        self._files[full] = file
        parent, _, name = full.rpartition("/")
        while True:
            self._dirs.setdefault(parent or "/", set()).add(name)
            if not parent:
                return
            parent, _, name = parent.rpartition("/")

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        times = {"st_atime": self._time, "st_mtime": self._time, "st_ctime": self._time,
                 "st_uid": self._uid, "st_gid": self._gid}
        file = self._files.get(path)
        if file is not None:
            size = file[2]
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": size,
                    "st_blocks": (size + 511) // 512, **times}
        if path in self._dirs:
            return {"st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2, "st_size": 0, **times}
        raise OSError(errno.ENOENT, path)

    def readdir(self, path: str, fh: int) -> list[str]:
        try:
            return self._listing[path]
        except KeyError:
            raise OSError(errno.ENOTDIR if path in self._files else errno.ENOENT, path) from None

    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT):
            raise OSError(errno.EROFS, path)
        file = self._files.get(path)
        if file is None:
            raise OSError(errno.EISDIR if path in self._dirs else errno.ENOENT, path)
        with self._lock:
            fh, self._next_fh = self._next_fh, self._next_fh + 1
            self._open[fh] = _OpenFile(*file)
        return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        handle = self._open.get(fh)
        if handle is None:
            raise OSError(errno.EBADF, path)
        end = min(offset + size, handle.size)
        parts: list[bytes] = []
        pos = offset
        try:
            while pos < end:
                start = pos - pos % BLOCK_BYTES
                data = handle.block(start)
                if start + len(data) <= pos:
                    break  # shorter than listed: the file changed; return what there is
                parts.append(data[pos - start:end - start])
                pos = start + len(data)
        except FileNotFoundError as e:
            raise OSError(errno.ENOENT, path) from e
        except DatasetError as e:
            log.error("read %s bytes %d..%d (data set %r) failed from tier and source: %s",
                      path, offset, end, handle.reader.name, e)
            raise OSError(errno.EIO, path) from e
        except Exception as e:
            log.exception("read %s bytes %d..%d (data set %r) failed", path, offset, end,
                          handle.reader.name)
            raise OSError(errno.EIO, path) from e
        return b"".join(parts)

    def release(self, path: str, fh: int) -> int:
        with self._lock:
            self._open.pop(fh, None)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        total = sum(size for _, _, size in self._files.values())
        return {"f_bsize": BLOCK_BYTES, "f_frsize": 4096, "f_blocks": (total + 4095) // 4096,
                "f_bfree": 0, "f_bavail": 0, "f_files": len(self._files), "f_ffree": 0,
                "f_namemax": 255}

    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK:
            raise OSError(errno.EROFS, path)
        self.getattr(path)
        return 0

    # The mount is `ro`, so the kernel refuses these first; answered anyway, in case it is not.
    create = write = truncate = mkdir = rmdir = unlink = rename = symlink = link = _erofs
    chmod = chown = utimens = mknod = setxattr = removexattr = _erofs


# -- mounting --------------------------------------------------------------------------------


def _mounts() -> list[str]:
    """Mount points the kernel lists (``/proc/mounts`` escapes space, tab, \\n and \\ in octal)."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 1:
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
    return out


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    return os.path.realpath(mountpoint) in _mounts()


def check_mountpoint(mountpoint: str | os.PathLike[str]) -> str:
    """The mount point's absolute path, or MountError saying why it will not do."""
    path = os.path.realpath(mountpoint)
    if not os.path.exists(path):
        raise MountError(f"mount point {path} does not exist: create it (mkdir -p {path})")
    if not os.path.isdir(path):
        raise MountError(f"mount point {path} is not a directory")
    if is_mounted(path):
        raise MountError(f"{path} is already a mount point (unmount it: fusermount -u {path})")
    if os.listdir(path):
        raise MountError(f"mount point {path} is not empty: the mount would hide its files; "
                         "choose an empty directory")
    return path


def _fuse() -> Any:
    """mfusepy's FUSE class, or MountError naming the missing device or what to install."""
    if not os.path.exists(FUSE_DEVICE):
        raise MountError(f"no FUSE device {FUSE_DEVICE}: load the kernel module (modprobe fuse) "
                         "or, in a container, give it the device (--device /dev/fuse) and "
                         "CAP_SYS_ADMIN")
    try:
        import mfusepy
    except ImportError as e:
        raise MountError("mounting needs mfusepy: pip install 'alnair-dataset[mount]'") from e
    except OSError as e:  # mfusepy looks libfuse up when imported
        raise MountError(f"libfuse not found ({e}): install it, e.g. apt-get install libfuse2 "
                         "fuse3 (dnf install fuse fuse3-libs)") from e
    return mfusepy.FUSE


def open_readers(names: Sequence[str], *, tier_url: str | None = None,
                 source: str | None = None, prefix: str | None = None) -> dict[str, DatasetReader]:
    """Mount path -> reader: "" for a single data set, its name for each of several."""
    if not names:
        raise MountError(f"no data set named: pass NAME or set ${ENV_DATASET} / ${ENV_DATASETS}")
    if source and len(names) > 1:
        raise MountError("--source names one data set's source; with several data sets set "
                         "ALNAIR_DATASET_<NAME>_SOURCE for each")
    readers: dict[str, DatasetReader] = {}
    try:
        for name in names:
            if "/" in name or name in (".", ".."):
                raise MountError(f"data set name {name!r} cannot be a directory name")
            key = "" if len(names) == 1 else name
            readers[key] = DatasetReader(name, tier_url=tier_url, source=source, prefix=prefix)
    except BaseException:
        for reader in readers.values():
            reader.close()
        raise
    return readers


def mount(names: Sequence[str], mountpoint: str | os.PathLike[str], *,
          tier_url: str | None = None, source: str | None = None, prefix: str | None = None,
          allow_other: bool = False) -> None:
    """Mount the data sets ``names`` read-only on ``mountpoint``; return once it is unmounted
    (``fusermount -u``, SIGINT or SIGTERM). MountError/DatasetError before mounting if the
    mount point, the FUSE device, libfuse or a data set will not do."""
    path = check_mountpoint(mountpoint)
    readers = open_readers(names, tier_url=tier_url, source=source, prefix=prefix)
    try:
        fuse = _fuse()
        operations = DatasetOperations(readers)
    except BaseException:
        for reader in readers.values():
            reader.close()
        raise
    options: dict[str, Any] = {"fsname": "alnair:" + "+".join(names), "subtype": "alnair",
                               "ro": True, "kernel_cache": True, "attr_timeout": 60,
                               "entry_timeout": 60}
    if allow_other:
        options["allow_other"] = True
    try:
        log.info("mounting %s on %s (%d files)", ",".join(names), path, len(operations._files))
        fuse(operations, path, foreground=True, nothreads=False, **options)
    except RuntimeError as e:
        raise MountError(f"libfuse could not mount on {path} (status {e}); the lines above say "
                         "why (mounting needs CAP_SYS_ADMIN or a setuid fusermount)") from e
    finally:
        for reader in readers.values():
            reader.close()


def spawn_mount(names: Sequence[str], mountpoint: str | os.PathLike[str], *,
                tier_url: str | None = None, source: str | None = None,
                prefix: str | None = None, allow_other: bool = False,
                env: Mapping[str, str] | None = None, log_path: str | None = None,
                timeout: float = 60.0) -> tuple[int, str]:
    """Mount in a process of its own that outlives the caller; return ``(pid, log_path)`` once
    the kernel lists the mount, or MountError with the end of its log if it exits first."""
    path = check_mountpoint(mountpoint)
    _fuse()
    if log_path is None:
        log_path = os.path.join(tempfile.gettempdir(),
                                f"alnair-mount{path.replace('/', '-')}.log")
    command = [sys.executable, "-c", "import sys; from alnair_dataset import _mount; "
               "sys.exit(_mount.main())", ",".join(names), path, "--foreground"]
    for flag, value in (("--tier-url", tier_url), ("--source", source), ("--prefix", prefix)):
        if value:
            command += [flag, value]
    if allow_other:
        command.append("--allow-other")
    launched = subprocess.run([sys.executable, "-c", _LAUNCH, log_path, *command],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ if env is None else env))
    if launched.returncode != 0:
        raise MountError(f"could not start the mount process: {launched.stderr.strip()}")
    pid = int(launched.stdout)
    deadline = time.monotonic() + timeout
    while not is_mounted(path):
        if not _running(pid):
            tail = Path(log_path).read_text(errors="replace").strip().splitlines()[-5:]
            raise MountError(f"the mount process exited before mounting {path}: "
                             + " | ".join(tail))
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGTERM)
            raise MountError(f"{path} not mounted within {timeout:.0f} s (log: {log_path})")
        time.sleep(0.05)
    return pid, log_path


# Started by spawn_mount and gone at once, so the mount process is nobody's child (as after
# daemon(3)): it outlives the caller and no Popen object of the caller waits for it.
_LAUNCH = ("import subprocess, sys\n"
           "with open(sys.argv[1], 'ab') as log:\n"
           "    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log,\n"
           "                             stderr=subprocess.STDOUT, start_new_session=True)\n"
           "print(child.pid)\n"
           "child.returncode = 0  # not waited for, on purpose\n")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no longer does)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def unmount(mountpoint: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
    """Unmount an alnair mount (``fusermount -u``); return once the kernel no longer lists it."""
    path = os.path.realpath(mountpoint)
    if not is_mounted(path):
        raise MountError(f"{path} is not a mount point")
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    command = [tool, "-u", path] if tool else ["umount", path]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise MountError(f"{' '.join(command)} failed: {done.stderr.strip() or done.returncode}"
                         " (a process still using the mount keeps it busy: close it first)")
    deadline = time.monotonic() + timeout
    while is_mounted(path):
        if time.monotonic() > deadline:
            raise MountError(f"{path} still mounted {timeout:.0f} s after {' '.join(command)}")
        time.sleep(0.05)


# -- alnair-dataset-mount --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alnair-dataset-mount",
        description="Mount cached data sets read-only, so code that reads files reads through "
                    "the cache. The tier, source and prefix default to $ALNAIR_CACHE_TIER_URL, "
                    "the data set's source variable and $ALNAIR_CACHE_PREFIX, as for "
                    "DatasetReader. Unmount with fusermount -u MOUNTPOINT.")
    parser.add_argument("names", metavar="NAME",
                        help="a data set, or several separated by commas (one directory each); "
                             f"'-' for ${ENV_DATASET} / ${ENV_DATASETS}")
    parser.add_argument("mountpoint", metavar="MOUNTPOINT", help="an empty directory")
    parser.add_argument("--tier-url", help="redis://…, dir:///…, alluxio://…")
    parser.add_argument("--source", help="s3://bucket/prefix or file:///path, for a data set "
                                         "the tier does not know")
    parser.add_argument("--prefix", help="the tier's key prefix")
    parser.add_argument("--allow-other", action="store_true",
                        help="let other users read it (as non-root: user_allow_other in "
                             "/etc/fuse.conf)")
    parser.add_argument("--foreground", action="store_true",
                        help="serve in this process until unmounted or interrupted")
    return parser


def _names(arg: str) -> list[str]:
    if arg != "-":
        return [n.strip() for n in arg.split(",") if n.strip()]
    single = os.environ.get(ENV_DATASET, "")
    return [single] if single else [n.strip() for n in os.environ.get(ENV_DATASETS, "").split(",")
                                    if n.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    names = _names(args.names)
    options = {"tier_url": args.tier_url, "source": args.source, "prefix": args.prefix,
               "allow_other": args.allow_other}
    try:
        if args.foreground:
            mount(names, args.mountpoint, **options)
        else:
            pid, log_path = spawn_mount(names, args.mountpoint, **options)
            print(f"mounted {','.join(names)} on {os.path.realpath(args.mountpoint)} "
                  f"(pid {pid}, log {log_path}); unmount: fusermount -u {args.mountpoint}")
    except DatasetError as e:
        print(f"alnair-dataset-mount: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
