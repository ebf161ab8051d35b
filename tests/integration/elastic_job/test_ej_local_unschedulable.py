"""A training job no card of the machine can hold, in local mode as a new user meets it:
`alnair up` on one simulated 80 GiB card, `alnair job submit` of workers asking 200 GiB.
`alnair job submit` answers that the job waits (Pending) and what is missing, `alnair job
describe` shows it, and a delete ends it; nothing was started."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_jobs import P, local_platform

from alnair_common.testing import wait_until


@pytest.mark.timeout(240)
def test_a_job_larger_than_every_card_says_so_while_it_waits(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with local_platform(tmp_path, "sim:1x80") as platform:
        said = platform.submit("huge", ckpt=ckpt, steps=10, step_sleep=0.1, min_replicas=1, max_replicas=2,
                               memory=200)
        assert "submitted training job default/huge, pending (Unschedulable)" in said.stdout, said.stdout
        assert "200 GiB" in said.stdout and "cannot be placed as asked" in said.stderr, said.stderr

        def unschedulable():  # type: ignore[no-untyped-def]
            r = platform.record("huge")
            return r if r is not None and r.state.reason == "Unschedulable" else None

        r = wait_until(unschedulable, timeout=60, interval=0.5, what="the job Pending/Unschedulable")
        assert r.state.phase == P.JOB_PHASE_PENDING and r.state.replicas == 0
        assert "200 GiB and 30 % of one card" in r.state.message
        assert "the largest 80 GiB" in r.state.message
        shown = platform.cli("job", "describe", "huge")
        assert shown.returncode == 0, shown.stderr
        assert "Unschedulable" in shown.stdout and "lower spec.worker" in shown.stdout
        assert "huge" not in platform.cli("ps").stdout, "no worker was started"

        assert platform.cli("job", "delete", "huge").returncode == 0
        wait_until(lambda: (x := platform.record("huge")) is not None and x.state.phase == P.JOB_PHASE_DELETED,
                   timeout=30, interval=0.5, what="the job deleted")
