"""alnair_trainer.ElasticTrainer outside a job: alone it is a world of one (the same script run
by hand); a half-set rendezvous environment is refused with what to set."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from alnair_trainer import ElasticTrainer, TrainerConfigError


class Counter:
    def __init__(self) -> None:
        self.sum = torch.zeros(1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"sum": self.sum.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.sum = state["sum"].clone()


def test_alone_it_trains_as_a_world_of_one_from_the_given_step(tmp_path: Path) -> None:
    counter, seen = Counter(), []
    progress = tmp_path / "progress"

    def step(t: ElasticTrainer) -> None:
        value = torch.ones(1)
        dist.all_reduce(value)  # collectives work: a process group of one
        counter.sum += value
        seen.append((t.rank, t.world_size, t.step))

    trainer = ElasticTrainer({"counter": counter}, step=3, env={"ALNAIR_PROGRESS_FILE": str(progress)})
    trainer.run(step, steps=7)
    assert seen == [(0, 1, 3), (0, 1, 4), (0, 1, 5), (0, 1, 6)]
    assert trainer.step == 7 and counter.sum.item() == 4 and trainer.rounds == 1
    assert progress.read_text().split()[0] == "7"
    assert not dist.is_initialized()  # it leaves its process group behind


def test_collectives_get_the_collective_timeout_after_the_join() -> None:
    """The group starts with join_timeout_s and then gets collective_timeout_s: through
    ``set_timeout`` (public since torch 2.15), or ``_set_pg_timeout`` before it (PyTorch 2.11
    on the H200, where this file runs too: scripts/gpu/README.md)."""
    seen = []

    def step(t: ElasticTrainer) -> None:
        group = dist.distributed_c10d._get_default_group()
        seen.append(group._get_backend(torch.device("cpu")).options._timeout.total_seconds())

    ElasticTrainer({}, join_timeout_s=7, collective_timeout_s=42).run(step, steps=1)
    assert seen == [42.0]


def test_a_step_that_always_fails_is_the_callers_error_after_a_few_rounds() -> None:
    calls = []

    def broken(t: ElasticTrainer) -> None:
        calls.append(t.rounds)
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        ElasticTrainer({}, env={}, max_failed_rounds=3).run(broken, steps=5)
    assert calls == [1, 2, 3]
    assert not dist.is_initialized()


@pytest.mark.parametrize(("env", "says"), [
    ({"ALNAIR_RDZV_ENDPOINT": "127.0.0.1:1"}, "cannot name a rendezvous"),
    ({"ALNAIR_RDZV_ENDPOINT": "127.0.0.1:1", "ALNAIR_RDZV_ID": "j", "ALNAIR_RDZV_NODES": "two"},
     "want an id and min:max"),
    ({"ALNAIR_RDZV_ENDPOINT": "127.0.0.1:1", "ALNAIR_RDZV_ID": "j", "ALNAIR_RDZV_NODES": "1:2",
      "ALNAIR_RDZV_CONF": "join_timeout"}, "is not key=value"),
])
def test_a_half_set_rendezvous_environment_is_refused_with_what_to_set(env: dict[str, str], says: str) -> None:
    with pytest.raises(TrainerConfigError, match=says):
        ElasticTrainer({}, env=env).run(lambda t: None, steps=1)
