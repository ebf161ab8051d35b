"""The collectives bench's numbers and report: message sizes, bus bandwidth, NCCL's log, and the files written.

Pure functions over collectives.json's dict (no torch, no MPI), so the launcher, the ranks and the tests share
one definition of each; ``write_outputs`` writes ``collectives.json``, ``collectives.md``, ``busbw.csv`` and,
where matplotlib imports, ``busbw.png``.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min to max; float32 elements, so at least 4 bytes."""
    for n in (min_bytes, max_bytes):
        if n < 4 or n & (n - 1):
            raise ValueError(f"message sizes must be powers of two of at least 4 bytes, got {n}")
    if min_bytes > max_bytes:
        raise ValueError(f"--min-bytes {min_bytes} is above --max-bytes {max_bytes}")
    sizes, n = [], min_bytes
    while n <= max_bytes:
        sizes.append(n)
        n *= 2
    return sizes


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: each rank sends and receives 2(n-1)/n of the buffer."""
    return algbw * 2 * (ranks - 1) / ranks


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def human_time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def nccl_transports(log_text: str) -> dict:
    """What NCCL's INFO log says it chose: channel transports (P2P/..., SHM/..., NET/...) and graph link types."""
    via = sorted(set(re.findall(r"Channel \d+(?:/\d+)? : .*? via (\S+)", log_text)))
    links = sorted(set(re.findall(r"\btype (\w+/\w+)", log_text)))
    version = re.search(r"NCCL version (\S+)", log_text)
    return {"via": via, "graph_links": links, "version": version.group(1) if version else None}


def _backend_label(name: str, b: dict) -> str:
    mode = b.get("rank0", {}).get("mode")
    return f"{name} ({mode})" if mode in ("host-staged", "device") and name.startswith("mpi") else name


def render_markdown(result: dict) -> str:
    """The report's tables from collectives.json's dict; backends without results are listed with why."""
    ranks, device = result["ranks"], result["device"]
    done = {k: v for k, v in result["backends"].items() if v.get("rank0", {}).get("sizes")}
    lines = [f"### All-reduce bus bandwidth (sum, float32, {ranks} ranks, {device})", ""]
    lines.append(f"busbw = algbw × 2(n−1)/n with n = {ranks} (the nccl-tests convention); "
                 "algbw = message bytes / time; GB/s = 10⁹ B/s; time = median per-iteration time of rank 0 over "
                 "the timed batches, each batch after a barrier and ending with a device synchronisation.")
    lines.append("")
    if done:
        head = ["size"] + [f"{_backend_label(k, v)} {c}" for k, v in done.items() for c in ("busbw GB/s", "time")]
        lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        sizes = sorted({s["bytes"] for v in done.values() for s in v["rank0"]["sizes"]})
        for size in sizes:
            row = [human_bytes(size)]
            for v in done.values():
                cell = next((s for s in v["rank0"]["sizes"] if s["bytes"] == size), None)
                if cell is None:
                    row += ["—", "—"]
                else:
                    bad = "" if cell["check"] == "ok" else " ✗"
                    row += [f"{cell['busbw_GBps']:.3g}{bad}", human_time(cell["time_s"])]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    trained = {k: v["rank0"]["train"] for k, v in done.items() if v["rank0"].get("train", {}).get("median_s")}
    if trained:
        any_train = next(iter(trained.values()))
        m = any_train["model"]
        lines += [f"### Data-parallel training step ({ranks} ranks, one {device} device each)", ""]
        lines.append(f"TransformerEncoder LM: {m['layers']} layers, d={m['dim']}, {m['heads']} heads, seq {m['seq']}, "
                     f"vocab {m['vocab']}, {any_train['params'] / 1e6:.1f}M parameters; per-rank batch {m['batch']}; "
                     f"AdamW; {any_train['precision']}; {any_train['warmup']} warm-up + {len(any_train['step_s'])} "
                     "timed steps, each after a barrier; median. Communication share (MPI): the bucket's copies, "
                     "Allreduce and staging over the step, median; it includes waiting for the slower rank.")
        lines += ["", "| backend | gradient reduction | step (median) | samples/s | communication share "
                  "| replicas equal |", "|---|---|---:|---:|---:|---|"]
        for k, t in trained.items():
            share = f"{100 * t['comm_share']:.0f} %" if t.get("comm_share") is not None else "overlapped (DDP)"
            lines.append(f"| {_backend_label(k, done[k])} | {t['reduction']} | {human_time(t['median_s'])} | "
                         f"{t['samples_per_s']:.1f} | {share} | {'yes' if t['in_sync'] else 'NO'} |")
        lines.append("")
    lines += ["### Backends", ""]
    for k, v in result["backends"].items():
        lines.append(f"- **{k}**: {v['status']}" + (f" — {v['reason']}" if v.get("reason") else "")
                     + (f"; {v['detail']}" if v.get("detail") else ""))
    lines += ["", "### Environment", ""]
    for key, value in result["environment"].items():
        lines.append(f"- {key}: {value}")
    topo = result["topology"]
    lines.append(f"- RDMA: {topo['rdma']}")
    lines.append(f"- plot: {result['plot']}")
    lines += ["", "Command:", "", "```", " ".join(result["command"]), "```"]
    for name in ("gpus", "topo"):
        if topo.get(name):
            lines += ["", f"`{' '.join(topo['commands'][name])}`:", "", "```", topo[name].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def write_json(path: Path, data: dict) -> None:
    """Written beside and renamed over: a reader (the launcher, a cut-off run) never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def write_plot(result: dict, out: Path, png: bool) -> str:
    rows = [(k, s) for k, v in result["backends"].items() for s in v.get("rank0", {}).get("sizes", [])]
    with open(out / "busbw.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "bytes", "time_s", "algbw_GBps", "busbw_GBps", "check"])
        for k, s in rows:
            w.writerow([k, s["bytes"], f"{s['time_s']:.9g}", f"{s['algbw_GBps']:.6g}", f"{s['busbw_GBps']:.6g}",
                        s["check"]])
    if not rows:
        return "no all-reduce results: no plot"
    if not png:
        return "busbw.png at the end of the run (data in busbw.csv)"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not importable: plot data only, in busbw.csv"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, v in result["backends"].items():
        sizes = v.get("rank0", {}).get("sizes", [])
        if sizes:
            ax.plot([s["bytes"] for s in sizes], [s["busbw_GBps"] for s in sizes], marker="o", ms=3,
                    label=_backend_label(k, v))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [b for b in (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 24, 1 << 27, 1 << 30)
             if result["min_bytes"] <= b <= result["max_bytes"]]
    ax.set_xticks(ticks, [human_bytes(b) for b in ticks])
    ax.set_xlabel("message size")
    ax.set_ylabel("all-reduce bus bandwidth (GB/s)")
    ax.set_title(f"all-reduce busbw, {result['ranks']} ranks, {result['device']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "busbw.png", dpi=120)
    plt.close(fig)
    return "busbw.png (data in busbw.csv)"


def write_outputs(result: dict, out: Path, png: bool = False) -> None:
    result["plot"] = write_plot(result, out, png)
    write_json(out / "collectives.json", result)
    (out / "collectives.md").write_text(render_markdown(result))
