"""Each package's public door, pinned: a public surface changes only on purpose.

A package's ``__all__`` (its ``__init__``) is what other packages may use; private modules
stay private (an import-linter contract). Changing what a package exports means changing
this list in the same commit, which a reviewer sees. Every name listed must exist.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC: dict[str, list[str]] = {
    "alnair_common": [
        "AlnairError", "Bus", "BusUnavailableError", "ConfigError", "DecodeError",
        "DurableConsumer", "Health", "HealthServer", "KVUpdate", "KVWatch", "NotCaughtUpError",
        "PermanentError", "PermissionDeniedError", "RevisionConflictError", "Service",
        "ServiceSettings", "StreamFollower", "TemporaryError", "TypedKV", "UnknownSubjectError",
        "Versioned", "configure_logging", "ensure_streams", "get_logger", "load_settings",
        "publish_error", "run_service", "subjects"
    ],
    "alnair_common.bus": [
        "Bus", "DurableConsumer", "KVUpdate", "KVWatch", "MSG_ID_HEADER", "NotCaughtUpError",
        "StreamFollower", "TypedKV", "Versioned", "decode", "encode", "ensure_streams",
        "publish_error"
    ],
    "alnair_common.testing": [
        "wait_for", "wait_until"
    ],
    "alnair_gpu": [
        "DeviceSample", "GIB", "GpuError", "GpuInfo", "GpuSampler", "GpuSnapshot",
        "GpuUnavailableError", "HealthEvent", "InjectedHealth", "InventoryFormatError",
        "InventorySource", "MpsCard", "MpsDaemons", "MpsFault", "NodeGpus", "NvmlInventory", "NvmlSampler",
        "ProcessSample",
        "RecordedInventory", "RecordedWorkload", "Recording", "ReplaySampler", "SampleSourceError",
        "SimulatedInventory", "from_proto", "load_recording", "mps_faults", "parse_recording", "to_proto"
    ],
    "alnair_kubelet": [
        "ContainerDevices", "ContainerIdentity", "DEFAULT_SOCKET", "KubeletError",
        "KubeletUnavailableError", "PodResourcesClient", "PodResourcesSnapshot",
        "UnsupportedCgroupError", "api", "identify_cgroup", "identify_pid", "unified_path"
    ],
    "alnair_lifecycle": [
        "JOB_LABEL", "JOB_NAMESPACE_LABEL", "LifecyclePublisher", "PHASE_NAMES", "PROGRESS_ENV",
        "PlanChanges", "RENDEZVOUS_LABEL", "Retention", "STATES_BUCKET", "TERMINAL", "WORKER_ENV", "expired",
        "forget_expired", "is_after", "newer_plan_waiting", "observed_at", "phase_name", "plan_changes",
        "rank", "state_key",
        "worker_command", "worker_env", "worker_labels"
    ],
    "alnair_trainer": [
        "CONF_ENV", "ENDPOINT_ENV", "ElasticTrainer", "ID_ENV", "NODES_ENV", "PROGRESS_ENV", "Stateful",
        "TrainerConfigError"
    ],
    "alnair_opendata": [
        "Column", "DATA_ROOT", "DatasetNotFoundError", "LABELS", "OpenDataError", "RATES",
        "RecordingError", "SCALARS", "SERIES", "SERIES_NAMES", "STATS", "SUMMARY", "SUMMARY_NAMES",
        "SchemaMismatchError", "convert", "dataset_dir", "feature_columns", "features", "load_runs",
        "load_series", "quantile", "rate", "statistics_of"
    ],
    "alnair_dataset": [
        "AccessDeniedError", "AlluxioTier", "Budget", "CHUNK_BYTES", "CacheTier", "CachedSamples",
        "CapacityError",
        "DatasetEnvironment", "DatasetError", "DatasetFileSystem", "DatasetFootprint", "DatasetReader",
        "DirectoryTier",
        "FileEntry", "InvalidSpecError", "LocalSource", "MountError", "NoSuchBucketError",
        "PathNotAllowedError",
        "ReadStats", "RedisTier", "S3Source", "Source", "SourceChangedError", "SourceError",
        "SourceFile", "SourceUnreachableError", "StoreResult", "TierPermissionError",
        "TierUnavailableError", "TierUsage",
        "chunk_id", "connect", "content_defined_chunks", "dataset_environment", "dataset_variable",
        "fixed_chunks", "gib", "is_mounted", "keyed_chunk_ids", "loader_options", "mount",
        "open_source", "open_tier", "selected", "spawn_mount", "store_file", "unmount"
    ],
    "alnair_admission_webhook": [
        "AdmissionServer", "AdmissionWebhookError", "AdmissionWebhookService",
        "AdmissionWebhookSettings", "CacheEndpoint", "CertificateError", "DatasetCatalog",
        "KnownDataset", "LoadedPki", "PkiPolicy", "PodDataset", "PodMutation", "ReviewError",
        "TlsSecret", "WebhookPki", "issue", "mutate_pod", "names_for", "new_ca", "parse_review",
        "patch_ca_bundle", "renewal_reason", "review_response"
    ],
    "alnair_exporter": [
        "AttributedProcess", "CgroupPodResolver", "ChainResolver", "CudaUsage", "ExporterService",
        "ExporterSettings", "ExporterStats", "HostCounters", "HostReader", "HostUsage",
        "InvalidWorkloadEvent", "NodeSampler", "NodeView", "PidResolver", "PodGpuUsage",
        "RegionReading", "RegionScanner", "StaticResolver", "WorkloadDirectory", "WorkloadInfo",
        "WorkloadSeries", "WorkloadUpdate", "WorkspacePidResolver"
    ],
    "alnair_profiler": [
        "ANNOTATION_PREFIX", "KernelNameReport", "LaunchReport", "OwnerProfile", "PeakPrediction", "ProfileStore",
        "ProfilerError", "ProfilerService", "ProfilerSettings", "SERIES", "SeriesSummary",
        "StoreUnavailableError", "TrainingDetection", "WorkloadProfile", "detect",
        "detect_from_kernel_names", "detect_from_launches", "detect_from_utilisation", "open_store", "predict_peak"
    ],
    "alnair_scheduler": [
        "POD_GROUP_LABEL", "PROFILE_ANNOTATION", "Profile", "SCHEDULER_NAME", "SchedulerService",
        "SchedulerSettings"
    ],
    "alnair_device_plugin": [
        "Allocator", "Assignment", "AssignmentIndex", "ContainerGrant", "ContainerPaths",
        "DevicePluginError", "DevicePluginService", "DevicePluginSettings", "InvalidDevicesError",
        "MountSpec", "NoAssignmentError", "Resource", "Workspaces", "assignment_from_proto",
        "open_source", "parse_units", "unit_id"
    ],
    "alnair_cache_hydrator": [
        "AddRequest", "CacheHydratorError", "CacheHydratorService", "CacheHydratorSettings",
        "DatasetSpec", "DatasetStatus", "InvalidRequestError", "Phase", "RemoveRequest",
        "SourceRule", "SourceRules", "TierBusyError"
    ],
    "alnair_elastic_job": [
        "CapacityChanged", "Controller", "Deadlines", "DeleteCommand", "ElasticDemand",
        "ElasticJobError", "ElasticJobService", "ElasticJobSettings", "FreeCard", "Hysteresis",
        "JOB_LABEL", "JOB_NAMESPACE_LABEL", "JobInput", "JobSpecError", "JobStatus", "Launcher",
        "Phase", "PhaseInfo", "RendezvousComplete", "RestartPolicy", "ScaleCommand", "ScalingCurve",
        "StepReported", "Submit", "TABLE", "Tick", "TrackedJob", "TrainingJob", "TransitionError",
        "WorkerActions", "WorkerExited", "WorkerRefused", "WorkerRequest", "WorkerStarted",
        "WorkersPlaced", "allocate", "command_from_proto", "fits", "from_mapping", "from_proto",
        "from_yaml", "job_key", "phase_from_proto", "refusal_input", "rendezvous_input",
        "state_table_markdown", "state_to_proto", "step", "step_input", "submitted",
        "timeout_seconds", "to_proto", "training_job_crd", "worker_actions", "worker_input"
    ],
    "alnair_kube_bridge": [
        "Changed", "KubeBridgeService", "KubeBridgeSettings", "ResourceWatch", "Synced",
        "dataset_crd", "is_alnair_pod", "pod_workload"
    ],
    "alnair_local_agent": [
        "JobFiles", "LocalAgentService", "LocalAgentSettings", "Submission", "Workspace",
        "cuda_share", "workload_env"
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{package}.__all__ lists a name twice"
    assert sorted(exported) == PUBLIC[package], (
        f"{package}'s public surface changed; if on purpose, update PUBLIC in this file: "
        f"added {sorted(set(exported) - set(PUBLIC[package]))}, "
        f"removed {sorted(set(PUBLIC[package]) - set(exported))}")
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it does not define: {missing}"

