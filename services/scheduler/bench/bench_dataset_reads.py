"""First epoch over an already-hydrated data set: from a node-local tier vs a remote one.

    export ALNAIR_TESTBIN=$(scripts/testbin | tail -1)
    .venv/bin/python services/scheduler/bench/bench_dataset_reads.py --threads 8 --rounds 3

What the scheduler's data-locality term buys, measured on real reads: the same data set is
hydrated (alnair_dataset's ``store_file``, as the hydrator does) into

* a **directory tier** on this machine's disk (``dir:///``) — what a pod placed on the node
  whose tier holds the data reads (the files are in the page cache after hydrating, as a
  warm node-local cache is);
* a **redis-server** on loopback — a tier on the same node reached over TCP;
* the same redis-server **behind a TCP proxy that adds a network hop**: each ``--rtt-ms`` of
  round-trip delay (half each way) and a ``--gbps`` link for the bytes coming back — what a
  pod placed on another node reads (the proxy stands for the network; no real second host
  exists here, and loopback has neither latency nor a link limit of its own).

An epoch reads every file once through the data client (``DatasetReader``, no write-back;
every read must be a hit and equal the source), with ``--threads`` reader threads; the
ways are interleaved over ``--rounds`` rounds and the median epoch is reported. Prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from alnair_common.testing.redis_cluster import start_redis_node
from alnair_common.testing.testbin import locate
from alnair_dataset import Budget, CacheTier, DatasetReader, open_source, open_tier, store_file

MIB = 1 << 20


class HopProxy:
    """A TCP proxy adding ``rtt`` seconds per round trip and a ``bytes_per_second`` link on
    the way back: a network hop between a reader and a tier on another node."""

    def __init__(self, upstream: tuple[str, int], rtt: float, bytes_per_second: float) -> None:
        self.upstream, self.half, self.rate = upstream, rtt / 2, bytes_per_second
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.rate), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, rate: float) -> None:
        try:
            while data := src.recv(1 << 20):
                time.sleep(self.half + (len(data) / rate if rate else 0.0))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def hydrate(tier: CacheTier, name: str, root: Path) -> None:
    """Store every file of ``root`` as the hydrator does, and mark the data set READY."""
    source = open_source(f"file://{root}")
    tier.set_meta(name, {"source": f"file://{root}", "include": "[]", "exclude": "[]",
                         "phase": "hydrating", "budget_bytes": str(1 << 40)})
    budget = Budget(tier)
    for file in source.list():
        store_file(tier, name, source, file, budget)
    tier.set_meta(name, {"phase": "ready"})


def epoch(reader: DatasetReader, expected: dict[str, bytes], threads: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for path, data in zip(expected, pool.map(reader.read, expected), strict=True):
            if data != expected[path]:
                raise AssertionError(f"{path} differs from the source")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--small", type=int, default=2000, help="files of 64 KiB (images)")
    parser.add_argument("--shards", type=int, default=16, help="shards of 8 MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 0.2, 1.0],
                        help="added round trip of each simulated hop (one remote tier each)")
    parser.add_argument("--gbps", type=float, default=10.0, help="the hop's link, Gbit/s")
    args = parser.parse_args()
    rng = random.Random(1)
    sets = {"small files (64 KiB)": {f"{i:05d}.jpg": rng.randbytes(64 << 10) for i in range(args.small)},
            "large shards (8 MiB)": {f"{i:03d}.tar": rng.randbytes(8 * MIB) for i in range(args.shards)}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        redis = start_redis_node(locate(), work / "redis", maxmemory="1gb")
        proxies = [HopProxy((redis.host, redis.port), rtt / 1000, args.gbps * 1e9 / 8)
                   for rtt in args.rtt_ms]
        try:
            tiers = {
                "node-local directory tier (dir:///, local disk)": f"dir://{work}/tier",
                "Redis on the same node (loopback TCP)": redis.url,
            } | {f"Redis on another node (+{rtt:g} ms RTT, {args.gbps:g} Gbit/s hop)":
                 f"redis://127.0.0.1:{proxy.port}/0" for rtt, proxy in zip(args.rtt_ms, proxies, strict=True)}
            print("| data set | tier the pod reads | first epoch (s) | MB/s | files/s | vs local |\n"
                  "|---|---|---|---|---|---|")
            for title, files in sets.items():
                name = "bench" + str(len(files))
                root = work / "src" / name
                root.mkdir(parents=True)
                for path, data in files.items():
                    (root / path).write_bytes(data)
                for url in (f"dir://{work}/tier", redis.url):  # the proxy reaches the same Redis
                    hydrate(open_tier(url, budget_bytes=1 << 40, prefix="b"), name, root)
                readers: dict[str, Callable[[], DatasetReader]] = {
                    label: (lambda url=url, name=name: DatasetReader(name, tier_url=url, prefix="b",
                                                          threads=args.threads, write_back=False))
                    for label, url in tiers.items()}
                times: dict[str, list[float]] = {label: [] for label in tiers}
                for _ in range(args.rounds):  # interleaved: drift of the shared cores hits all alike
                    for label, make in readers.items():
                        with make() as reader:
                            times[label].append(epoch(reader, files, args.threads))
                            assert reader.stats.misses == 0, f"{label}: a read missed the tier"
                size = sum(len(d) for d in files.values())
                local = statistics.median(next(iter(times.values())))
                for label, runs in times.items():
                    t = statistics.median(runs)
                    print(f"| {title} | {label} | {t:.2f} | {size / t / 1e6:,.0f} | "
                          f"{len(files) / t:,.0f} | {t / local:.1f}x |")
        finally:
            for proxy in proxies:
                proxy.close()
            redis.process.stop()


if __name__ == "__main__":
    main()
