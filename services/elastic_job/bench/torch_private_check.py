"""Checks, on whatever torch is installed, the torch details ``alnair_trainer`` relies on that
torch does not promise (run it after a torch upgrade, and on a machine without pytest, such as
the lent H200):

* the rendezvous exit op and ``DynamicRendezvousHandler._stop_heartbeats`` (a prompt leave),
* ``distributed_c10d._world.group_count`` (reset after a group that failed to start),
* the collective timeout set after the join: ``set_timeout`` (torch >= 2.15) or
  ``_set_pg_timeout`` (before), read back from the gloo backend of a world of one.

Exits non-zero if any is missing.

    bash scripts/gpu/repo_env.sh python3 services/elastic_job/bench/torch_private_check.py
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

from alnair_trainer import ElasticTrainer


def main() -> int:
    found = {"exit op": hasattr(dr, "_RendezvousExitOp"),
             "stop heartbeats": hasattr(dr.DynamicRendezvousHandler, "_stop_heartbeats"),
             "group count": hasattr(dist.distributed_c10d._world, "group_count")}
    seen: list[float] = []

    def step(t: ElasticTrainer) -> None:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        seen.append(backend.options._timeout.total_seconds())

    ElasticTrainer({}, join_timeout_s=7, collective_timeout_s=42).run(step, steps=2)
    found["collective timeout"] = seen == [42.0, 42.0]
    print(f"torch {torch.__version__} (public set_timeout: {hasattr(dist.distributed_c10d, 'set_timeout')}):",
          ", ".join(f"{k} {'ok' if v else 'MISSING'}" for k, v in found.items()))
    return 0 if all(found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
