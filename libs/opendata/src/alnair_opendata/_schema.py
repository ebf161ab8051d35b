"""The dataset's columns: name, type and unit of every per-second series and summary column.

One table for everything that writes or reads the data (the recorder on the GPU machine,
``convert``, the loaders, the analysis), so a column cannot change its unit in one place only.
Plain Python: the recorder imports it where pyarrow is not installed.

Units are spelled once: ``s``, ``bytes``, ``ratio`` (0..1), ``count``, ``W``, ``degC``, ``Hz``,
``bytes/s``, ``1/s``, ``cores`` (CPU seconds per second), ``J``; ``-`` for labels.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # "float64", "int64", "string", "bool"
    unit: str
    doc: str
    source: str = ""


# --- per-second series ------------------------------------------------------------------------
# Gauges and counters (``*_total``, cumulative since the run's start) sampled once a second.

_EXP = "exporter /metrics"
_NVML = "exporter /metrics (NVML, device-wide)"
_PROC = "/proc of the workload's process tree"

SERIES: tuple[Column, ...] = (
    Column("t_s", "float64", "s", "seconds since the run's `alnair run` was started", "recorder"),
    Column("gpu_util_ratio", "float64", "ratio", "SM utilisation of the workload's processes (NVML per process)",
           _EXP + " alnair_gpu_util / 100"),
    Column("gpu_mem_util_ratio", "float64", "ratio", "memory-bandwidth utilisation of the workload's processes",
           _EXP + " alnair_gpu_mem_util / 100"),
    Column("gpu_memory_bytes", "float64", "bytes", "device memory the workload's processes hold (NVML)",
           _EXP + " alnair_pod_gpu_memory_used_bytes"),
    Column("cuda_memory_used_bytes", "float64", "bytes", "device memory held through CUDA (interceptor)",
           _EXP + " alnair_cuda_memory_used_bytes"),
    Column("cuda_memory_limit_bytes", "float64", "bytes", "the workload's memory limit (interceptor)",
           _EXP + " alnair_cuda_memory_limit_bytes"),
    Column("cuda_compute_limit_ratio", "float64", "ratio", "the workload's compute limit, share of one GPU",
           _EXP + " alnair_cuda_compute_limit_ratio"),
    Column("cuda_available_tokens", "float64", "count", "launch tokens left in the compute bucket",
           _EXP + " alnair_cuda_available_tokens"),
    Column("cuda_sm_utilization_ratio", "float64", "ratio", "SM utilisation the interceptor measured",
           _EXP + " alnair_cuda_sm_utilization_ratio"),
    Column("cuda_launch_period_seconds", "float64", "s", "period of the repeating launch sequence (0: none)",
           _EXP + " alnair_cuda_launch_period_seconds"),
    Column("cuda_processes", "float64", "count", "live processes of the workload using the GPU",
           _EXP + " alnair_cuda_processes"),
    Column("kernel_launches_total", "float64", "count", "kernel and graph launches so far",
           _EXP + " alnair_cuda_kernel_launches_total"),
    Column("throttled_seconds_total", "float64", "s", "time launches waited for tokens so far",
           _EXP + " alnair_cuda_throttled_seconds_total"),
    Column("memcpy_htod_bytes_total", "float64", "bytes", "bytes copied host to device so far",
           _EXP + ' alnair_cuda_memcpy_bytes_total{direction="htod"}'),
    Column("memcpy_dtoh_bytes_total", "float64", "bytes", "bytes copied device to host so far",
           _EXP + ' alnair_cuda_memcpy_bytes_total{direction="dtoh"}'),
    Column("memcpy_dtod_bytes_total", "float64", "bytes", "bytes copied device to device so far",
           _EXP + ' alnair_cuda_memcpy_bytes_total{direction="dtod"}'),
    Column("device_util_ratio", "float64", "ratio", "share of the last period the GPU ran kernels",
           _NVML + " alnair_gpu_utilization_ratio"),
    Column("device_memory_bandwidth_ratio", "float64", "ratio", "memory-bandwidth utilisation of the GPU",
           _NVML + " alnair_gpu_memory_bandwidth_utilization_ratio"),
    Column("device_memory_used_bytes", "float64", "bytes", "device memory in use on the GPU",
           _NVML + " alnair_gpu_memory_used_bytes"),
    Column("power_watts", "float64", "W", "GPU power draw", _NVML + " alnair_gpu_power_watts"),
    Column("temperature_celsius", "float64", "degC", "GPU core temperature", _NVML + " alnair_gpu_temperature_celsius"),
    Column("sm_clock_hertz", "float64", "Hz", "SM clock", _NVML + " alnair_gpu_sm_clock_hertz"),
    Column("pcie_tx_bytes_per_second", "float64", "bytes/s", "PCIe transmit throughput",
           _NVML + " alnair_gpu_pcie_transmit_bytes_per_second"),
    Column("pcie_rx_bytes_per_second", "float64", "bytes/s", "PCIe receive throughput",
           _NVML + " alnair_gpu_pcie_receive_bytes_per_second"),
    Column("pod_network_receive_bytes_total", "float64", "bytes", "network bytes received by the workload's cgroup",
           _EXP + " alnair_pod_network_receive_bytes_total (absent where the workload has no cgroup of its own)"),
    Column("pod_network_transmit_bytes_total", "float64", "bytes", "network bytes sent by the workload's cgroup",
           _EXP + " alnair_pod_network_transmit_bytes_total (absent where the workload has no cgroup of its own)"),
    Column("cpu_seconds_total", "float64", "s", "CPU time (user + system) of the process tree so far", _PROC),
    Column("rss_bytes", "float64", "bytes", "resident memory of the process tree", _PROC),
    Column("io_read_bytes_total", "float64", "bytes", "bytes the process tree read (read syscalls, rchar)", _PROC),
    Column("io_write_bytes_total", "float64", "bytes", "bytes the process tree wrote (write syscalls, wchar)", _PROC),
    Column("processes", "float64", "count", "processes in the tree (DataLoader workers included)", _PROC),
    Column("threads", "float64", "count", "threads of the process tree", _PROC),
    Column("iterations_total", "float64", "count", "iterations (or requests) finished so far",
           "the workload's own per-iteration end times (--truth-file)"),
)
SERIES_NAMES: tuple[str, ...] = tuple(c.name for c in SERIES)

# Counters become rates (the derivative over each sample interval) before statistics.
RATES: dict[str, tuple[str, str]] = {
    "kernel_launches_total": ("kernel_launch_rate", "1/s"),
    "throttled_seconds_total": ("throttled_ratio", "ratio"),
    "memcpy_htod_bytes_total": ("memcpy_htod_bytes_per_second", "bytes/s"),
    "memcpy_dtoh_bytes_total": ("memcpy_dtoh_bytes_per_second", "bytes/s"),
    "memcpy_dtod_bytes_total": ("memcpy_dtod_bytes_per_second", "bytes/s"),
    "cpu_seconds_total": ("cpu_cores", "cores"),
    "io_read_bytes_total": ("io_read_bytes_per_second", "bytes/s"),
    "io_write_bytes_total": ("io_write_bytes_per_second", "bytes/s"),
    "pod_network_receive_bytes_total": ("network_receive_bytes_per_second", "bytes/s"),
    "pod_network_transmit_bytes_total": ("network_transmit_bytes_per_second", "bytes/s"),
    "iterations_total": ("iterations_per_second", "1/s"),
}
# Series whose value is set, not measured, get no statistics (a limit is a label).
NO_STATS = frozenset({"t_s", "cuda_memory_limit_bytes", "cuda_compute_limit_ratio", "cuda_processes"})
STATS: tuple[str, ...] = ("max", "mean", *(f"p{d}0" for d in range(1, 10)))
"""Per statistic series: maximum, mean and the nine deciles p10..p90."""


def stat_series() -> list[tuple[str, str]]:
    """(name, unit) of every series that gets the statistics: gauges as recorded, counters as rates."""
    out = []
    for c in SERIES:
        if c.name in NO_STATS:
            continue
        out.append(RATES[c.name] if c.name in RATES else (c.name, c.unit))
    return out


# --- the summary ------------------------------------------------------------------------------

LABELS: tuple[Column, ...] = (
    Column("run_id", "string", "-", "unique id of the run (one workload's execution)"),
    Column("part", "string", "-", "which recording command recorded it (grid part K/N)"),
    Column("workload", "string", "-", "workload class (opendata_workloads.CLASSES)"),
    Column("is_training", "bool", "-", "truth: the class runs a training loop"),
    Column("batch", "int64", "count", "batch size (poisson_infer: the largest request)"),
    Column("width", "int64", "count", "model width (channels, d_model or hidden size)"),
    Column("layers", "int64", "count", "blocks per stage or layers"),
    Column("precision", "string", "-", "fp32 or bf16 (autocast)"),
    Column("workers", "int64", "count", "DataLoader workers"),
    Column("rate", "float64", "1/s", "request rate (poisson_infer; 0 otherwise)"),
    Column("iterations", "int64", "count", "fixed work: iterations or requests asked for"),
    Column("compute_percent", "int64", "percent", "`alnair run --gpu-compute`"),
    Column("memory_gib", "int64", "GiB", "`alnair run --gpu-memory`"),
    Column("mode", "string", "-", "alone or shared"),
    Column("co_runner", "string", "-", "workload class of the run sharing the GPU ('' alone)"),
    Column("co_runner_run_id", "string", "-", "run_id of the co-runner ('' alone)"),
    Column("co_runner_compute_percent", "int64", "percent", "the co-runner's compute limit (0 alone)"),
    Column("gpu", "string", "-", "the GPU model, or SIMULATED"),
    Column("exit_code", "int64", "-", "the workload's exit status (None: not seen)"),
    Column("timed_out", "bool", "-", "stopped by the recorder's per-run timeout"),
    Column("wall_s", "float64", "s", "`alnair run` start to exit"),
    Column("setup_s", "float64", "s", "process start to first iteration (imports, CUDA, model)"),
    Column("work_s", "float64", "s", "first to last iteration end"),
    Column("iterations_done", "int64", "count", "iterations the workload reported"),
    Column("torch_peak_bytes", "float64", "bytes", "torch.cuda.max_memory_allocated at the end"),
    Column("profile_is_training", "bool", "-", "`alnair profile`: training detected"),
    Column("profile_period_s", "float64", "s", "`alnair profile`: iteration period (0: unresolved)"),
    Column("profile_confidence", "float64", "ratio", "`alnair profile`: confidence of the detection"),
    Column("profile_evidence", "string", "-", "`alnair profile`: evidence of the detection (nvml, launches)"),
    Column("profile_predicted_peak_bytes", "float64", "bytes", "`alnair profile`: predicted peak GPU memory"),
    Column("profile_gpu_util_max", "float64", "ratio", "`alnair profile`: maximum GPU utilisation"),
    Column("profile_gpu_memory_max", "float64", "bytes", "`alnair profile`: maximum GPU memory"),
)

SCALARS: tuple[Column, ...] = (
    Column("samples", "int64", "count", "per-second samples in the series"),
    Column("duration_s", "float64", "s", "first to last sample"),
    Column("throughput_per_second", "float64", "1/s", "iterations per second between the first and last finished"),
    Column("iteration_period_s", "float64", "s", "1 / throughput_per_second"),
    Column("memory_peak_bytes", "float64", "bytes", "largest of cuda_memory_used_bytes and gpu_memory_bytes"),
    Column("kernel_launches", "float64", "count", "kernel launches over the run"),
    Column("throttled_s", "float64", "s", "time launches waited for tokens over the run"),
    Column("throttled_share", "float64", "ratio", "throttled_s / duration_s"),
    Column("memcpy_htod_bytes", "float64", "bytes", "host-to-device copy bytes over the run"),
    Column("memcpy_dtoh_bytes", "float64", "bytes", "device-to-host copy bytes over the run"),
    Column("memcpy_dtod_bytes", "float64", "bytes", "device-to-device copy bytes over the run"),
    Column("cpu_seconds", "float64", "s", "CPU time of the process tree over the run"),
    Column("rss_peak_bytes", "float64", "bytes", "largest resident memory of the process tree"),
    Column("io_read_bytes", "float64", "bytes", "bytes read over the run"),
    Column("io_write_bytes", "float64", "bytes", "bytes written over the run"),
    Column("network_receive_bytes", "float64", "bytes", "network bytes received over the run"),
    Column("network_transmit_bytes", "float64", "bytes", "network bytes sent over the run"),
    Column("energy_joules", "float64", "J", "GPU energy over the run (device-wide: a co-runner's share included)"),
    Column("busy_share", "float64", "ratio", "share of samples with gpu_util_ratio >= 0.03"),
)


def feature_columns() -> tuple[Column, ...]:
    """Every feature computed from the series: the scalars, then each statistic of each series."""
    stats = tuple(Column(f"{name}_{stat}", "float64", unit, f"{stat} of {name} over the run's samples")
                  for name, unit in stat_series() for stat in STATS)
    return SCALARS + stats


SUMMARY: tuple[Column, ...] = LABELS + feature_columns()
SUMMARY_NAMES: tuple[str, ...] = tuple(c.name for c in SUMMARY)


def as_doc() -> dict[str, list[dict[str, str]]]:
    """The schema as JSON (``schema.json`` beside the data)."""
    def rows(cols: tuple[Column, ...]) -> list[dict[str, str]]:
        return [{"name": c.name, "dtype": c.dtype, "unit": c.unit, "doc": c.doc, **({"source": c.source}
                                                                                    if c.source else {})}
                for c in cols]
    return {"series": rows(SERIES), "summary": rows(SUMMARY)}
