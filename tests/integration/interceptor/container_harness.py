"""A stand-in for a pod's container on the fake driver: the device plugin's real Allocate
answer, handed to a tenant program the way a container runtime would.

The interceptor under test is the test library (``<build>/testlib/libalnair_cuda.so``),
which differs from the shipped one only in its compiled-in fixed limits path: ``<build>/
trusted/limits`` instead of ``/etc/alnair/limits`` (native/cuda_intercept/Makefile). Two
ways to run the tenant:

* :meth:`Pod.run` — no mounts: the container sees the host's paths and "mounting" the
  limits file means copying it to the fixed path. Enough for everything the interceptor
  decides on its own (which file, which workspace, which limit, what a wiped region
  gives).
* :meth:`Pod.run_contained` — the grant's mounts applied for real, in a private user and
  mount namespace (``unshare``, no root needed): bind mounts, read-only where the grant
  says so, ``/etc/ld.so.preload`` included (over a private copy of ``/etc``, so the host's
  is never touched). This is what proves the tenant's writes fail. Skipped where the
  kernel allows no unprivileged namespaces.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from alnair_common.cuda_region import HEADER_BYTES, REGION_BYTES
from alnair_device_plugin import (
    Allocator,
    Assignment,
    AssignmentIndex,
    ContainerPaths,
    Resource,
    Workspaces,
    unit_id,
)
from alnair_gpu import SimulatedInventory

GIB = 1 << 30
LIMIT_GIB = 4
GPUS = SimulatedInventory.parse("sim:1x80").inventory()
CARD = GPUS.gpus[0].uuid
# Grabs 1 GiB at a time until refused or at 8 GiB (the fake card has 16); optionally holds
# what it got until its stdin closes, then tries `then` GiB more.
TENANT = """
import ctypes, json, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
ptr = ctypes.c_uint64()
def grab(most):
    n = 0
    while n < most and cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) == 0:
        n += 1
    return n
got = grab(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
out = {"gib": got, "ld_preload": os.environ.get("LD_PRELOAD")}
if len(sys.argv) > 2:
    print(json.dumps(out), flush=True)
    sys.stdin.read()
    out = {"then": grab(int(sys.argv[2]))}
print(json.dumps(out), flush=True)
"""


@dataclass
class Tenant:
    """What a tenant program printed."""

    returncode: int
    result: dict
    stderr: str


def dynamic_loader() -> str:
    """The ELF interpreter of this Python (PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2."""
    data = Path(os.path.realpath(sys.executable)).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "a 64-bit ELF Python"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if kind == 3:  # PT_INTERP
            return data[offset:offset + size].rstrip(b"\0").decode()
    raise AssertionError("no PT_INTERP in the Python binary")


def namespaces_available() -> str | None:
    """None when unprivileged user and mount namespaces work here, else why not."""
    if shutil.which("unshare") is None:
        return "util-linux unshare is not installed"
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                          capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"no user+mount namespace: {done.stderr.strip()}"


def zero_region_slots(region: Path) -> None:
    """What a hostile tenant does to its region: every process slot zeroed (free, no pid,
    no memory in use) and the header's memory limit set to 'none'."""
    with open(region, "r+b") as f:
        f.seek(32)  # header.memory_limit_bytes (ci_region_layout.h)
        f.write(struct.pack("<Q", 2**64 - 1))
        f.seek(HEADER_BYTES)
        f.write(bytes(REGION_BYTES - HEADER_BYTES))


class Pod:
    """One pod with ``LIMIT_GIB`` GiB of the fake card, allocated by the real Allocator."""

    def __init__(self, tmp: Path, testlib: Path, fixed_limits: Path, *, contained: bool) -> None:
        self.tmp = tmp
        self.testlib = testlib
        self.fake = testlib.parent.parent / "fake"
        self.fixed_limits = fixed_limits
        self.contained = contained
        root = tmp / "ctr"  # where the container sees things (contained), else the host paths
        if contained:
            paths = ContainerPaths(interceptor_host=testlib,
                                   interceptor_container=str(root / "lib" / "libalnair_cuda.so"),
                                   workspace_container=str(root / "run" / "alnair"),
                                   limits_container=str(fixed_limits))
        else:
            paths = ContainerPaths(interceptor_host=testlib, interceptor_container=str(testlib),
                                   workspace_container=str(tmp / "workspaces" / "pod-1"),
                                   limits_container=str(fixed_limits))
        index = AssignmentIndex(tmp / "state")
        index.add(Assignment(uid="pod-1", namespace="ml", name="train", gpu_uuid=CARD, gpu_index=0,
                             memory_gib=LIMIT_GIB, compute_percent=0))
        self.allocator = Allocator(index, Workspaces(tmp / "workspaces"), paths, gpus=lambda: GPUS)
        (self.grant,) = self.allocator.allocate(
            Resource.MEMORY, [[unit_id(Resource.MEMORY, CARD, k) for k in range(LIMIT_GIB)]])
        self.host_workspace = tmp / "workspaces" / "pod-1"
        self.workspace = Path(paths.workspace_container)  # as the container sees it
        if not contained:
            # The stand-in for the read-only bind mount of the limits file at the fixed path.
            fixed_limits.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.host_workspace / "limits", fixed_limits)
            fixed_limits.chmod(0o444)

    @property
    def region(self) -> Path:
        """The region file on the host."""
        return self.host_workspace / "cuda.region"

    def env(self, **changes: str | None) -> dict[str, str]:
        """The container's environment (the grant's), with the tenant's ``changes``
        (None removes a variable)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": str(self.fake),
               **self.grant.envs}
        for key, value in changes.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-I", "-c", TENANT, *args]

    def run(self, argv: list[str] | None = None, *, env: dict[str, str] | None = None) -> Tenant:
        """Runs the tenant program (or ``argv``) to completion."""
        done = subprocess.run(argv or self.command(), env=env if env is not None else self.env(),
                              capture_output=True, text=True, timeout=120)
        lines = done.stdout.strip().splitlines()
        return Tenant(done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr)

    def start_holding(self, gib: int, then: int, *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Starts a tenant process that takes ``gib`` GiB and holds it until told to go on
        (:meth:`go_on`), then tries ``then`` GiB more."""
        proc = subprocess.Popen(self.command(str(gib), str(then)), env=env if env is not None else self.env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["gib"] == gib, first
        return proc

    @staticmethod
    def go_on(proc: subprocess.Popen[str]) -> dict:
        out, err = proc.communicate(input="", timeout=60)
        assert proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def run_contained(self, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """Runs the bash ``script`` inside the pod: a private user+mount namespace with the
        grant's mounts in place, then ``env`` exported (the container's environment as the
        tenant left it). ``$TENANT`` in the script is the tenant program's command line."""
        assert self.contained
        etc = self.tmp / "etc"
        shutil.rmtree(etc, ignore_errors=True)
        self.fixed_limits.parent.mkdir(parents=True, exist_ok=True)
        setup = ["set -eu",
                 # A private /etc, so that /etc/ld.so.preload exists only in here.
                 f"mkdir -p {q(etc)} && (cp -a /etc/. {q(etc)}/ 2>/dev/null || true)",
                 f"mount --bind {q(etc)} /etc",
                 # The fixed path's directory, private too: nothing is created on the host.
                 f"mount -t tmpfs tmpfs {q(self.fixed_limits.parent)}"]
        # /etc/ld.so.preload last: a runtime mounts everything before the container's first
        # process, while here the setup's own commands would load a library not mounted yet.
        mounts = sorted(self.grant.mounts, key=lambda m: m.container_path == "/etc/ld.so.preload")
        for mount in mounts:
            target, source = q(mount.container_path), q(mount.host_path)
            if Path(mount.host_path).is_dir():
                setup.append(f"mkdir -p {target}")
            else:
                setup.append(f"mkdir -p $(dirname {target}) && {{ [ -e {target} ] || touch {target}; }}")
            setup.append(f"mount --bind {source} {target}")
            if mount.read_only:
                setup.append(f"mount -o remount,bind,ro {target}")
        exports = [f"export {key}={q(value)}" for key, value in env.items()]
        tenant = " ".join(q(a) for a in self.command())
        body = "\n".join([*setup, *exports, f"TENANT={q(tenant)}", "set +e", script])
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
                               "bash", "-c", body], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                              capture_output=True, text=True, timeout=120)


def q(value: object) -> str:
    return shlex.quote(str(value))


def last_json(text: str) -> dict:
    lines = [line for line in text.strip().splitlines() if line.startswith("{")]
    assert lines, text
    return json.loads(lines[-1])

