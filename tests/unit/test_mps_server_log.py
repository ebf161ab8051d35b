"""Reading fatal GPU faults out of an MPS server log: the H200's own log of a real fault
(CUDA 13; scripts/gpu/mps_fault_check.sh), a log without one, and two faults in one log."""

from __future__ import annotations

from pathlib import Path

from alnair_gpu import MpsFault, mps_faults

RECORDED = (Path(__file__).parents[1] / "data" / "gpu" / "h200" / "mps" / "server_fault.log").read_text()


def test_the_recorded_fault_names_every_client_it_tore_down() -> None:
    # pid 1345 wrote through a bad pointer; 1303 (a matmul loop) lost its contexts with it;
    # 1377, started after the device reset, is in the log but no fault's. The log calls both
    # 1303 and 1345 "error trigging": it cannot tell the culprit.
    assert mps_faults(RECORDED) == [MpsFault(frozenset({1303, 1345}))]
    assert "error trigging process 1303" in RECORDED and "error trigging process 1345" in RECORDED


def test_a_log_without_a_fault_has_none() -> None:
    clean = "\n".join(line for line in RECORDED.splitlines() if "torn down" not in line and "sticky" not in line)
    assert mps_faults(clean) == [] and mps_faults("") == []


def test_two_faults_are_read_in_order_and_a_block_at_the_end_is_kept() -> None:
    block = RECORDED[RECORDED.index("\n[", RECORDED.index("to be torn down") - 120):]
    second = block.replace("1345", "2001").replace("1303", "2002")
    cut = second[:second.index("Server failed")]  # the log ends inside the pid list
    cut = cut[:cut.rindex("\n[")]
    assert mps_faults(RECORDED + "\n" + cut) == [MpsFault(frozenset({1303, 1345})),
                                                 MpsFault(frozenset({2001, 2002}))]
