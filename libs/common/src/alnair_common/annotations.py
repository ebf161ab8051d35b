"""Names Alnair writes on Kubernetes objects and local workloads: one place, one spelling.

Every key lives under ``ai.centaurus.io/`` (DESIGN.md); gang membership uses the label
``alnair.centaurus.io/pod-group``. Local workloads are addressed in commands as objects of
``alnair.local/v1``, which kube-bridge leaves to the local agent.
"""

PREFIX = "ai.centaurus.io/"
GPU_ASSIGNMENT = PREFIX + "gpu-assignment"
FILTER_TIMESTAMP = PREFIX + "filter-timestamp"
SCHEDULING_PROFILE = PREFIX + "scheduling-profile"
SIMULATED_GPU = PREFIX + "simulated-gpu"
POD_GROUP_LABEL = "alnair.centaurus.io/pod-group"
LOCAL_API_VERSION = "alnair.local/v1"

# Owners of pods that the profiler's owner-level annotations may be written on (kube-bridge
# carries them out; its RBAC grants patch on exactly these): (apiVersion, kind) → plural.
# A Deployment's pods are owned by its ReplicaSet, so a Deployment's profile lands on the
# ReplicaSet of each rollout (one profile per revision); the Deployment itself is not patched.
# Alnair's own kinds (alnair.centaurus.io, any version) are allowed besides these.
OWNER_KINDS = {("batch/v1", "Job"): "jobs", ("apps/v1", "StatefulSet"): "statefulsets",
               ("apps/v1", "ReplicaSet"): "replicasets"}

# The dataset cache (DESIGN.md, dataset cache). A pod names the data sets it reads, in its
# own namespace: ``ai.centaurus.io/dataset: "imagenet,coco"``. The seed's form is kept too:
# ``cacheDataset: "yes"`` caches what the pod's hostPath volumes hold (each volume one data
# set, source ``file://<hostPath>``). The admission webhook records what it changed under
# DATASET_MUTATED so a second pass (or a re-admitted pod) is left as it is.
DATASET = PREFIX + "dataset"
SEED_CACHE_DATASET = "cacheDataset"
DATASET_MUTATED = PREFIX + "dataset-mutated"
# "off": the pod's S3 clients are not pointed at the S3 gateway sidecar (the pod writes to S3
# with the default endpoint, which the read-only gateway would refuse).
DATASET_S3_GATEWAY = PREFIX + "dataset-s3-gateway"
