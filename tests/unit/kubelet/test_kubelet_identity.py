"""PID → pod on recorded cgroup v2 paths of containerd and CRI-O pods (tests/data/cgroups)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alnair_kubelet import UnsupportedCgroupError, identify_pid

CASES = json.loads((Path(__file__).parents[2] / "data" / "cgroups" / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_identify_pid_on_recorded_cgroup(case: dict, tmp_path: Path) -> None:
    pid = 4242
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(case["cgroup"])
    if case["expect"] == "unsupported":
        with pytest.raises(UnsupportedCgroupError, match="cgroup v1 only"):
            identify_pid(pid, proc_root=tmp_path)
        return
    found = identify_pid(pid, proc_root=tmp_path)
    if case["expect"] is None:
        assert found is None
        return
    assert found is not None
    assert (found.pod_uid, found.container_id, found.runtime, found.qos_class) == (
        case["expect"]["pod_uid"], case["expect"]["container_id"], case["expect"]["runtime"],
        case["expect"]["qos_class"])
    assert found.cgroup_path == case["cgroup"].split("0::", 1)[1].strip()


def test_both_runtimes_and_all_qos_classes_are_covered() -> None:
    seen = {(c["expect"]["runtime"], c["expect"]["qos_class"]) for c in CASES if isinstance(c["expect"], dict)}
    assert seen >= {(r, q) for r in ("containerd", "cri-o") for q in ("guaranteed", "burstable", "besteffort")}


def test_vanished_process_is_no_container(tmp_path: Path) -> None:
    assert identify_pid(999_999, proc_root=tmp_path) is None
