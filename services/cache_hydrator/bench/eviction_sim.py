"""Hit ratio of cache policies under epoch-style access (every sample once per epoch, in a
new random order each epoch), with the cache smaller than the data set.

Policies, over a cache of ``fraction`` × the data set's samples (all samples one size):

* ``LRU``: insert every miss, evict the least recently used;
* ``FIFO``: insert every miss, evict the oldest insert;
* ``no-eviction`` (CoorDL's "MinIO" policy, and what alnair_dataset does today: a miss is
  written back only while the budget has room, nothing is evicted for it): the first
  samples cached stay; each epoch hits exactly the cached fraction.

The first epoch (cold for all) is left out of the ratio.

    .venv/bin/python services/cache_hydrator/bench/eviction_sim.py --samples 20000 --epochs 5
"""

from __future__ import annotations

import argparse
import random
from collections import OrderedDict


def simulate(policy: str, samples: int, capacity: int, epochs: int, seed: int) -> float:
    rng = random.Random(seed)
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for epoch in range(epochs):
        order = list(range(samples))
        rng.shuffle(order)
        for s in order:
            hit = s in cache
            if epoch:
                hits += hit
                total += 1
            if hit:
                if policy == "LRU":
                    cache.move_to_end(s)
                continue
            if len(cache) < capacity:
                cache[s] = None
            elif policy in ("LRU", "FIFO"):
                cache.popitem(last=False)
                cache[s] = None
    return hits / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    policies = ("LRU", "FIFO", "no-eviction")
    print("| cache / data set | " + " | ".join(policies) + " | no-eviction ÷ LRU |")
    print("|---|" + "---|" * (len(policies) + 1))
    for fraction in (0.25, 0.5, 0.75):
        capacity = int(args.samples * fraction)
        ratios = {p: simulate(p, args.samples, capacity, args.epochs, args.seed)
                  for p in policies}
        print(f"| {fraction:.0%} | " + " | ".join(f"{ratios[p]:.1%}" for p in policies)
              + f" | {ratios['no-eviction'] / ratios['LRU']:.2f}× |")


if __name__ == "__main__":
    main()
