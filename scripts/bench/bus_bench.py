"""Publish→receive latency and throughput of 1 KiB messages: alnair_common vs raw nats-py.

Both run in the same process against the same loopback nats-server, interleaved, so their
ratio is meaningful on a noisy machine. Latency is measured one message at a time (publish,
wait for the subscriber to have it); throughput by publishing N messages back to back and
waiting for the last one to arrive.

    .venv/bin/python scripts/bench/bus_bench.py [--messages 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import nats

from alnair.v1 import metrics_pb2
from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer, free_port

SUBJECT = subjects.gpu_metrics("bench-node")


def payload_message() -> metrics_pb2.NodeSampleBatch:
    """A realistic sample batch padded to ~1 KiB."""
    msg = metrics_pb2.NodeSampleBatch(node="bench-node")
    for i in range(8):
        msg.gpus.add(gpu_uuid=f"GPU-{i:08x}-aaaa-bbbb-cccc-000000000000", gpu_index=i,
                     utilization_ratio=0.5, memory_used_bytes=1 << 30, memory_total_bytes=1 << 37,
                     power_watts=300.0, temperature_celsius=40.0)
    while msg.ByteSize() < 1024:
        msg.processes.add(pid=1000 + len(msg.processes), gpu_uuid="GPU-0", memory_used_bytes=1 << 28)
    return msg


class Raw:
    name = "raw nats-py"

    def __init__(self, nc, data: bytes) -> None:  # type: ignore[no-untyped-def]
        self.nc, self.data = nc, data

    async def subscribe(self, on_message) -> None:  # type: ignore[no-untyped-def]
        async def cb(msg) -> None:  # type: ignore[no-untyped-def]
            on_message()
        await self.nc.subscribe(SUBJECT, cb=cb)

    async def publish(self) -> None:
        await self.nc.publish(SUBJECT, self.data)

    async def flush(self) -> None:
        await self.nc.flush()


class RawProto(Raw):
    """Raw nats-py exchanging the same protobuf message, encoded and parsed by hand."""

    name = "raw nats-py + protobuf"

    def __init__(self, nc, msg: metrics_pb2.NodeSampleBatch) -> None:  # type: ignore[no-untyped-def]
        self.nc, self.msg = nc, msg

    async def subscribe(self, on_message) -> None:  # type: ignore[no-untyped-def]
        async def cb(msg) -> None:  # type: ignore[no-untyped-def]
            metrics_pb2.NodeSampleBatch.FromString(msg.data)
            on_message()
        await self.nc.subscribe(SUBJECT, cb=cb)

    async def publish(self) -> None:
        await self.nc.publish(SUBJECT, self.msg.SerializeToString())


class Typed:
    name = "alnair_common"

    def __init__(self, bus: Bus, msg: metrics_pb2.NodeSampleBatch) -> None:
        self.bus, self.msg = bus, msg

    async def subscribe(self, on_message) -> None:  # type: ignore[no-untyped-def]
        async def handler(_: str, __: metrics_pb2.NodeSampleBatch) -> None:
            on_message()
        await self.bus.subscribe(SUBJECT, metrics_pb2.NodeSampleBatch, handler)

    async def publish(self) -> None:
        await self.bus.publish(SUBJECT, self.msg)

    async def flush(self) -> None:
        await self.bus.nc.flush()


async def measure(client, latency_samples: int, messages: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    got = asyncio.Event()
    count = 0
    target = 0

    def on_message() -> None:
        nonlocal count
        count += 1
        if count >= target:
            got.set()

    await client.subscribe(on_message)
    await client.flush()
    latencies = []
    for _ in range(latency_samples):
        target = count + 1
        got.clear()
        t0 = time.perf_counter()
        await client.publish()
        await got.wait()
        latencies.append(time.perf_counter() - t0)
    target = count + messages
    got.clear()
    t0 = time.perf_counter()
    for _ in range(messages):
        await client.publish()
    await client.flush()
    await got.wait()
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        "msgs_per_s": messages / elapsed,
    }


async def main(messages: int, rounds: int, latency_samples: int) -> None:
    server = NatsServer(store_dir=Path(tempfile.mkdtemp()), port=free_port())
    server.start()
    msg = payload_message()
    data = msg.SerializeToString()
    results: dict[str, list[dict[str, float]]] = {
        "raw nats-py": [], "raw nats-py + protobuf": [], "alnair_common": []}
    try:
        for _ in range(rounds):
            for kind in ("raw", "raw-proto", "typed"):  # interleaved: same machine state
                if kind in ("raw", "raw-proto"):
                    nc = await nats.connect(server.url)
                    client = Raw(nc, data) if kind == "raw" else RawProto(nc, msg)
                    results[client.name].append(await measure(client, latency_samples, messages))
                    await nc.drain()
                else:
                    bus = await Bus.connect(server.url, service="bench")
                    client = Typed(bus, msg)
                    results[client.name].append(await measure(client, latency_samples, messages))
                    await bus.drain()
    finally:
        server.stop()
    print(f"payload {len(data)} bytes, {messages} messages x {rounds} rounds, "
          f"{latency_samples} latency samples per round\n")
    print("| client | p50 latency (ms) | p99 latency (ms) | throughput (msg/s) |")
    print("|---|---|---|---|")
    summary = {}
    for name, rows in results.items():
        p50 = statistics.median(r["p50_ms"] for r in rows)
        p99 = statistics.median(r["p99_ms"] for r in rows)
        tput = statistics.median(r["msgs_per_s"] for r in rows)
        summary[name] = tput
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {tput:,.0f} |")
    for base in ("raw nats-py", "raw nats-py + protobuf"):
        print(f"\nalnair_common / {base} throughput: {summary['alnair_common'] / summary[base]:.0%}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-samples", type=int, default=2000)
    a = p.parse_args()
    asyncio.run(main(a.messages, a.rounds, a.latency_samples))
