"""GPU run: the labelled corpus of issue #24 §1 — 20 workload families, each under the interceptor.

Every recording is one workload alone on the GPU (NVML's per-process utilisation of a
time-sliced GPU is the device's, so two at once would blur each other's series), sampled every
0.1 s by ``nvml_record.record`` — NVML's device and per-process fields — with the interceptor
loaded (no limit: 100 % compute, 60 GiB) so the same recording also carries the launch
signature the exporter would relay (read from the region every 0.5 s). Families come from
three zoos: ``workloads.py`` (the recordings CI already replays), ``opendata_workloads.py``
(the open dataset's classes) and ``corpus_workloads.py`` (families the detector never saw).

    python3 detect_corpus.py --out DIR [--part 1/2] [--seconds 15] [--deadline 540]
    python3 detect_corpus.py --list

A recording already in DIR (``NAME.jsonl.gz``) is kept, so a cut-off part resumes; the
deadline stops before a recording that would not finish in time. The device tool brings back
at most 8 files, so pack DIR in the device command (a part is ~18 recordings):

    python3 scripts/gpu/detect_corpus.py --out /tmp/corpus --part 1/2; tar czf "$OUT/corpus1.tgz" -C /tmp/corpus .
"""

from __future__ import annotations

import argparse
import gzip
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "native" / "cuda_intercept" / "bench"))

FIXED_ITERATIONS = "--iterations 100000000"  # opendata runs: bounded by --max-work-seconds instead


@dataclass(frozen=True)
class Entry:
    name: str
    family: str
    is_training: bool
    script: str
    args: str


def _entries() -> list[Entry]:
    new = {  # corpus_workloads.py: families the detector never saw
        "eval_train": ["--batch 128 --width 32",
                       "--batch 64 --width 64 --precision bf16 --eval-every 3 --eval-seconds 2"],
        "accum_train": ["--batch 8 --width 256 --layers 4 --accum 4",
                        "--batch 4 --width 512 --layers 6 --accum 8 --precision bf16"],
        "finetune_frozen": ["--batch 128 --width 64", "--batch 32 --width 32 --image 96"],
        "notebook_bursts": ["--batch 64 --width 32 --seed 1", "--batch 256 --width 64 --seed 2 --precision bf16"],
        "stalled_train": ["--batch 64 --width 32 --stall 0.3 --stall-share 0.3",
                          "--batch 128 --width 64 --stall 0.8 --stall-share 0.2 --seed 3"],
        "rl_loop": ["--batch 64 --width 64 --horizon 64", "--batch 256 --width 256 --horizon 128 --update-epochs 8"],
        "diffusion_train": ["--batch 64 --width 64", "--batch 16 --width 128 --image 128 --precision bf16"],
        "server_mixed": ["--batch 64 --width 32 --seed 1", "--batch 16 --width 64 --seed 2"],
        "infer_host": ["--batch 64 --width 32", "--batch 256 --width 64 --precision bf16"],
    }
    opendata = {  # opendata_workloads.py class -> (family, label, variants)
        "cnn_train": ("resnet_train", True, ["--batch 64 --width 64 --layers 2",
                                             "--batch 256 --width 32 --layers 1 --precision bf16"]),
        "lm_train": ("gpt_train", True, ["--batch 16 --width 256 --layers 4 --seq 256",
                                         "--batch 8 --width 768 --layers 8 --seq 512 --precision bf16"]),
        "batch_infer": ("steady_infer", False, ["--batch 256 --width 64", "--batch 64 --width 32 --precision bf16",
                                                "--batch 1024 --width 64 --precision bf16"]),
        "gnn_train": ("gnn_train", True, ["--nodes 50000 --width 128 --layers 2",
                                          "--nodes 200000 --width 64 --layers 3"]),
        "poisson_infer": ("poisson_infer", False, ["--rate 100 --batch 128", "--rate 400 --batch 512 --seed 2"]),
        "dataload_train": ("dataload_train", True, ["--batch 128 --workers 4 --width 64",
                                                    "--batch 64 --workers 1 --width 32"]),
    }
    old = [  # workloads.py, one variant each under the interceptor (CI's recordings have none)
        ("cnn_train", "cnn_train", True, "--batch 128"),
        ("transformer_train", "transformer_train", True, "--batch 32 --width 256 --layers 4"),
        ("mlp_train", "mlp_train", True, "--batch 256"),
        ("irregular", "irregular", False, "--seed 3"),
        ("idle", "idle", False, "--hold-gib 2"),
    ]
    from corpus_workloads import TRAINING  # noqa: PLC0415 - imports torch; not needed for --list's names

    out = [Entry(f"corpus_{f}_{i}", f, TRAINING[f], "corpus_workloads.py", f"{f} {v}")
           for f, vs in new.items() for i, v in enumerate(vs)]
    out += [Entry(f"corpus_{fam}_{i}", fam, label, "opendata_workloads.py", f"{cls} {FIXED_ITERATIONS} {v}")
            for cls, (fam, label, vs) in opendata.items() for i, v in enumerate(vs)]
    out += [Entry(f"corpus_{fam}_0", fam, label, "workloads.py", f"{w} {v}") for w, fam, label, v in old]
    return out


def record_one(e: Entry, seconds: float, out: Path) -> Path:
    from bench_common import child_env  # noqa: PLC0415
    from nvml_record import Started, record  # noqa: PLC0415

    ws = Path(tempfile.mkdtemp(prefix="alnair-corpus-"))
    truth = ws / "truth.txt"
    env = child_env(True, ws, ALNAIR_VGPU_MEMORY_BYTES=str(60 << 30), ALNAIR_VGPU_COMPUTE_PERCENT="100")
    env["ALNAIR_TRUTH_FILE"] = str(truth)  # workloads.py
    argv = shlex.split(e.args)
    if e.script == "workloads.py":
        argv += ["--seconds", str(seconds)]
    elif e.script == "opendata_workloads.py":
        argv += ["--max-work-seconds", str(seconds), "--truth-file", str(truth)]
    else:
        argv += ["--seconds", str(seconds), "--truth-file", str(truth)]
    log = open(out / f"{e.name}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(HERE / e.script), *argv], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    started = Started(proc, argv, truth, e.family, e.is_training, ws / "cuda.region")
    raw = record(e.name, 0.1, ws / f"{e.name}.jsonl", [started])
    log.close()
    final = out / f"{e.name}.jsonl.gz"
    with open(raw, "rb") as src, gzip.open(final.with_suffix(".part"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    final.with_suffix(".part").rename(final)
    shutil.rmtree(ws, ignore_errors=True)
    return final


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--part", default="1/1", help="K/N: every N-th entry from the K-th")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--deadline", type=float, default=540.0, help="seconds from start; no recording begins "
                   "that would end past it")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    k, n = (int(x) for x in a.part.split("/"))
    entries = _entries()[k - 1::n]
    if a.list:
        for e in entries:
            print(f"{e.name}\t{e.family}\t{'train' if e.is_training else 'other'}\t{e.script} {e.args}")
        return
    if a.out is None:
        p.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    for e in entries:
        if (a.out / f"{e.name}.jsonl.gz").exists():
            continue
        if time.time() - began + a.seconds + 12 > a.deadline:
            print(f"deadline: {e.name} and later left for a resumed run", flush=True)
            break
        t = time.time()
        path = record_one(e, a.seconds, a.out)
        print(f"{e.name}: {time.time() - t:.1f} s -> {path.name}", flush=True)


if __name__ == "__main__":
    main()
