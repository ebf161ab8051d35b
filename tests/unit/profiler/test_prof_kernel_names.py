"""Training detection from the launched kernels' names (the interceptor's kernel_names word):
trusted before the launch signature and NVML, silent where it does not know."""

from __future__ import annotations

from alnair_profiler import KernelNameReport, LaunchReport, detect, detect_from_kernel_names
from alnair_profiler._accumulator import WorkloadState
from alnair_profiler._domain import WorkloadInfo

# a launch signature that calls the workload training: a stable 8.8 ms loop, 500 repeats
LOOP = [LaunchReport(1.0 + k, 0.0088, 50 * (k + 1)) for k in range(10)]
TIMES = [0.2 * i for i in range(60)]
FLAT = [0.0] * 60  # NVML sees nothing


def names(launches: int, training: int, *, read: bool = True, torch: bool = True, gpu: str = "GPU-0",
          t: float = 10.0) -> KernelNameReport:
    return KernelNameReport("uid-1", t, gpu, launches, training, read, torch)


def test_training_named_kernels_mean_training_with_the_signature_period() -> None:
    d = detect(LOOP, TIMES, FLAT, kernel_names=[names(40_000, 12_000)])
    assert d.is_training and d.evidence == "kernel-names"
    assert d.period_seconds == 0.0088 and d.confidence >= 0.9
    assert "12000 of 40000" in d.reason
    # no signature: training all the same, period unknown
    alone = detect((), TIMES, FLAT, kernel_names=[names(3, 1)])
    assert alone.is_training and alone.evidence == "kernel-names" and alone.period_seconds == 0.0


def test_pytorch_without_backward_or_optimizer_kernels_is_not_training_even_when_it_loops() -> None:
    """Steady batched inference: the launch signature sees a loop; the names say no."""
    assert detect(LOOP, TIMES, FLAT).is_training  # what the signature alone says
    d = detect(LOOP, TIMES, FLAT, kernel_names=[names(5_000, 0)])
    assert not d.is_training and d.evidence == "kernel-names" and d.period_seconds == 0.0
    assert "5000 kernel launches" in d.reason


def test_names_decide_nothing_when_they_cannot_tell() -> None:
    assert detect_from_kernel_names([]) is None
    assert detect_from_kernel_names([names(4_999, 0)]) is None  # too few launches yet
    assert detect_from_kernel_names([names(50_000, 0, torch=False)]) is None  # not PyTorch: no baseline
    assert detect_from_kernel_names([names(50_000, 7, read=False)]) is None  # no names: counts mean nothing
    d = detect(LOOP, TIMES, FLAT, kernel_names=[names(50_000, 0, torch=False)])
    assert d.is_training and d.evidence == "launch-signature"  # the signature decides, as before
    fallback = detect((), TIMES, FLAT, kernel_names=[names(100, 0)])
    assert not fallback.is_training and fallback.evidence == "nvml-autocorrelation"


def test_gpus_of_one_workload_add_up() -> None:
    d = detect_from_kernel_names([names(3_000, 0, gpu="GPU-0"), names(3_000, 0, torch=False, gpu="GPU-1"),
                                  names(9_999, 5, read=False, gpu="GPU-2")])
    assert d is not None and not d.is_training and "6000 kernel launches" in d.reason
    d = detect_from_kernel_names([names(3_000, 0, gpu="GPU-0"), names(3_000, 40, gpu="GPU-1")])
    assert d is not None and d.is_training and "on 2 GPU(s)" in d.reason


def test_the_workload_state_keeps_the_latest_totals_per_gpu_and_checkpoints_them() -> None:
    state = WorkloadState("uid-1")
    state.add(names(6_000, 0, t=20.0))
    state.add(names(1_000, 0, t=5.0))  # an older reading arriving late changes nothing
    state.add(names(2_000, 0, torch=False, gpu="GPU-1", t=21.0))
    assert state.dirty and state.kernel_names["GPU-0"].kernel_launches == 6_000
    info = WorkloadInfo("uid-1", "infer", "team", "", (), "node-1", "Running", 1)
    profile = state.profile(info)
    assert not profile.training.is_training and profile.training.evidence == "kernel-names"
    back = WorkloadState.from_doc(state.to_doc())
    assert back.kernel_names == state.kernel_names
    old = state.to_doc()
    del old["kernel_names"]  # a checkpoint from before kernel names were kept
    assert WorkloadState.from_doc(old).kernel_names == {}
    state.add(names(8_000, 300, t=30.0))
    assert state.profile(info).training.is_training
