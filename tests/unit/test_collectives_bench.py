"""Issue #22's collectives bench: its formulas and report, and the gloo path end to end on CPU (two real ranks)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "services" / "elastic_job" / "bench"
BENCH = BENCH_DIR / "collectives_bench.py"
MODULES = ("collectives_report", "collectives_rank", "collectives_mpi", "collectives_bench")


@pytest.fixture(scope="module")
def modules():
    """The bench's three sibling modules, imported by name from their directory, as the scripts import each other."""
    sys.path.insert(0, str(BENCH_DIR))
    try:
        yield {name: importlib.import_module(name) for name in MODULES}
    finally:
        sys.path.remove(str(BENCH_DIR))
        for name in MODULES:
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def cb(modules):
    """collectives_report: the formulas and the report under test."""
    return modules["collectives_report"]


def test_bus_bandwidth_is_the_nccl_tests_all_reduce_factor(cb) -> None:
    assert cb.bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert cb.bus_bandwidth(10.0, 4) == pytest.approx(15.0)
    assert cb.bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert cb.bus_bandwidth(10.0, 1) == 0.0


def test_sizes_are_the_powers_of_two_between_the_bounds(cb) -> None:
    assert cb.message_sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    default = cb.message_sizes(1 << 10, 1 << 30)
    assert len(default) == 21 and default[0] == 1024 and default[-1] == 1 << 30
    assert cb.message_sizes(4096, 4096) == [4096]
    for lo, hi in ((1000, 4096), (1024, 3000), (2, 1024), (8192, 1024)):
        with pytest.raises(ValueError):
            cb.message_sizes(lo, hi)


def test_human_sizes_and_times(cb) -> None:
    assert [cb.human_bytes(n) for n in (512, 1024, 3 << 20, 1 << 30)] == ["512 B", "1 KiB", "3 MiB", "1 GiB"]
    assert cb.human_time(12.3e-6) == "12.3 µs" and cb.human_time(0.25) == "250.00 ms"


def test_nccl_transport_is_read_from_its_info_log(cb) -> None:
    log = (
        "host:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9\n"
        "host:1:9 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 24, bw 40.0/40.0, type NVL/PIX, sameChannels 1\n"
        "host:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "host:1:9 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    )
    parsed = cb.nccl_transports(log)
    assert parsed == {"via": ["P2P/CUMEM/read"], "graph_links": ["NVL/PIX"], "version": "2.27.5+cuda12.9"}
    assert cb.nccl_transports("") == {"via": [], "graph_links": [], "version": None}


def _result(cb, modules: dict) -> dict:
    def cell(nbytes: int, seconds: float, check: str = "ok") -> dict:
        algbw = nbytes / seconds / 1e9
        return {"bytes": nbytes, "time_s": seconds, "algbw_GBps": algbw, "busbw_GBps": cb.bus_bandwidth(algbw, 2),
                "check": check}

    train = {"model": modules["collectives_rank"].MODELS["cpu"], "params": 512_000, "precision": "float32", "warmup": 1,
             "step_s": [0.1, 0.1], "median_s": 0.1, "samples_per_s": 80.0, "in_sync": True}
    return {
        "ranks": 2, "device": "cpu", "command": ["python", "collectives_bench.py", "--out", "x"],
        "environment": {"torch": "2.x"}, "plot": "busbw.png",
        "topology": {"rdma": modules["collectives_bench"].RDMA_NONE, "commands": {}},
        "backends": {
            "gloo": {"status": "ok", "reason": "", "rank0": {
                "mode": "cpu", "sizes": [cell(1024, 1e-4), cell(2048, 2e-3)],
                "train": dict(train, reduction="DDP", comm_share=None)}},
            "mpi": {"status": "ok", "reason": "", "rank0": {
                "mode": "host-staged", "sizes": [cell(1024, 5e-5, check="2 of 256 elements != 3")],
                "train": dict(train, reduction="one bucket", comm_share=0.25)}},
            "nccl": {"status": "skipped", "reason": "NCCL needs CUDA devices (--device cuda)"},
        },
    }


def test_the_markdown_tables_carry_every_number_and_reason(cb, modules) -> None:
    md = cb.render_markdown(_result(cb, modules))
    assert "| size | gloo busbw GB/s | gloo time | mpi (host-staged) busbw GB/s | mpi (host-staged) time |" in md
    # 1 KiB in 100 µs = 0.01024 GB/s; busbw equals algbw at two ranks; the failed check is marked
    assert "| 1 KiB | 0.0102 | 100.0 µs | 0.0205 ✗ | 50.0 µs |" in md
    assert "| 2 KiB | 0.00102 | 2.00 ms | — | — |" in md
    assert "| gloo | DDP | 100.00 ms | 80.0 | overlapped (DDP) | yes |" in md
    assert "| mpi (host-staged) | one bucket | 100.00 ms | 80.0 | 25 % | yes |" in md
    assert "- **nccl**: skipped — NCCL needs CUDA devices (--device cuda)" in md
    assert "no RDMA numbers" in md and "python collectives_bench.py --out x" in md


def test_gloo_on_cpu_end_to_end(tmp_path: Path) -> None:
    """Two real gloo ranks over loopback: every size all-reduced to 1 + 2, the report written.

    No training steps: torch.optim's first step imports torch._dynamo, 5-20 s on this 2-core machine; the
    training path runs in the documented CPU dry run instead."""
    cmd = [sys.executable, str(BENCH), "--out", str(tmp_path), "--device", "cpu", "--backends", "gloo",
           "--min-bytes", "1024", "--max-bytes", "4096", "--warmup", "1", "--reps", "2", "--budget", "0.02",
           "--train-steps", "0", "--timeout", "60", "--deadline", "90"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "collectives.json").read_text())
    gloo = result["backends"]["gloo"]
    assert gloo["status"] == "ok", gloo
    sizes = gloo["rank0"]["sizes"]
    assert [s["bytes"] for s in sizes] == [1024, 2048, 4096]
    assert all(s["check"] == "ok" and s["time_s"] > 0 and s["busbw_GBps"] > 0 for s in sizes)
    assert gloo["rank0"]["train"] == {} and gloo["rank0"]["stopped_early"] is None
    assert result["command"][1:3] == [str(BENCH), "--out"]
    md = (tmp_path / "collectives.md").read_text()
    assert "| 4 KiB |" in md and "| size | gloo busbw GB/s | gloo time |" in md and "training step" not in md
    assert (tmp_path / "busbw.csv").read_text().count("\ngloo,") == 3


def test_open_mpi_4_gets_vader_for_shared_memory_and_5_gets_sm(modules: dict) -> None:
    bench = modules["collectives_bench"]
    four = bench.mca_args("mpi", "mpirun (Open MPI) 4.1.6")
    assert "self,vader" in four and "self,sm" not in four
    assert four[-2:] == ["btl_vader_single_copy_mechanism", "none"]
    assert "self,sm" in bench.mca_args("mpi", "mpirun (Open MPI) 5.0.11")
    assert bench.mca_args("mpi-tcp", "mpirun (Open MPI) 4.1.6") == bench.MPI_MCA["mpi-tcp"]
