"""train_elastic.py's job for launcher torch-inprocess: the same model, data and steps, run by
``alnair_trainer.ElasticTrainer`` — the trainer keeps its process across rounds.

The same linear regression on the same data (``train_elastic.data``): every step takes the
same global batch split among the ranks and sums their gradients, so the trajectory does not
depend on the world size and a disturbed run ends within float rounding of an undisturbed
one. Rank 0 appends ``<step> <world size> <unix time> <pid>`` to ``$CKPT_DIR/steps.log``
after every step and checkpoints every CKPT_EVERY steps (only for a restart of the whole
job: a joining worker gets the state from its peers); each worker appends
``<pid> <round> <rank> <world size> <step>`` to ``$CKPT_DIR/rounds.log`` on every round it
joins. At the end rank 0 writes ``final.pt``.

Environment: CKPT_DIR (required), STEPS (120), CKPT_EVERY (5), STEP_SLEEP (0.05 s), DEVICE
(cpu), WIDTH (0), as train_elastic.py.
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from train_elastic import GLOBAL_BATCH, data  # noqa: E402

from alnair_trainer import ElasticTrainer  # noqa: E402


class Step:
    """The model's state (``step`` included via the trainer) and its data-parallel step."""

    def __init__(self, ckpt_dir: Path) -> None:
        self.dir = ckpt_dir
        self.pause = float(os.environ.get("STEP_SLEEP", "0.05"))
        self.every = int(os.environ.get("CKPT_EVERY", "5"))
        self.device = torch.device(os.environ.get("DEVICE", "cpu"))
        width = int(os.environ.get("WIDTH", "0"))
        self.burn = torch.randn(width, width, device=self.device) if width else None
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1).to(self.device)
        self.x, self.y = (t.to(self.device) for t in data())
        self.joined = 0

    def __call__(self, t: ElasticTrainer) -> None:
        if t.rounds != self.joined:
            self.joined = t.rounds
            with open(self.dir / "rounds.log", "a") as f:
                f.write(f"{os.getpid()} {t.rounds} {t.rank} {t.world_size} {t.step}\n")
        shard = GLOBAL_BATCH // t.world_size
        start = (t.step * GLOBAL_BATCH) % len(self.x) + t.rank * shard
        xb, yb = self.x[start:start + shard], self.y[start:start + shard]
        self.model.zero_grad()
        loss = ((self.model(xb) - yb) ** 2).sum() / GLOBAL_BATCH
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
        with torch.no_grad():  # the state changes only after the step's last collective
            for p in self.model.parameters():
                p -= 0.05 * p.grad
        if self.burn is not None:
            (self.burn @ self.burn).sum().item()
        time.sleep(self.pause)
        if t.rank == 0:
            done = t.step + 1
            with open(self.dir / "steps.log", "a") as f:
                f.write(f"{done} {t.world_size} {time.time():.3f} {os.getpid()}\n")
            if done % self.every == 0:
                torch.save({"model": self.model.state_dict(), "step": done}, self.dir / "checkpoint.tmp")
                os.replace(self.dir / "checkpoint.tmp", self.dir / "checkpoint.pt")


def main() -> None:
    ckpt_dir = Path(os.environ["CKPT_DIR"])
    step = Step(ckpt_dir)
    start = 0
    if (ckpt_dir / "checkpoint.pt").exists():  # the whole job restarted
        saved = torch.load(ckpt_dir / "checkpoint.pt", map_location=step.device)
        step.model.load_state_dict(saved["model"])
        start = saved["step"]
    trainer = ElasticTrainer({"model": step.model}, step=start)
    trainer.run(step, steps=int(os.environ.get("STEPS", "120")))
    if trainer.rank == 0 and trainer.step >= int(os.environ.get("STEPS", "120")):
        torch.save({k: v.cpu() for k, v in step.model.state_dict().items()}, ckpt_dir / "final.pt")


if __name__ == "__main__":
    main()
