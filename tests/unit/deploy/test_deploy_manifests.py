"""The rendered overlays: what an operator applies, checked against what the services need.

Schema validity of every object is proven against the real apiserver in
tests/integration/deploy; here the content is checked: each Alnair service is deployed
once, probed on its health port, bounded in resources, configured only with settings it
knows (the same validation ``run_service`` does at start-up), and given no more access
than it uses — on the bus too: each pod mounts its own NKey seed and no other, as a
read-only file, and reaches the server over TLS.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_render import (
    BRAINS,
    HEALTH_PORT,
    K8S,
    NAMESPACE,
    OVERLAYS,
    REPO,
    SERVICES,
    find,
    main_container,
    pod_spec,
    render,
    service_package,
    workloads,
)

from alnair_common import Service
from alnair_common.annotations import OWNER_KINDS
from alnair_common.config import load_settings

CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "CSIDriver"}
BUS_MOUNT = "/var/run/secrets/alnair/bus"  # where a service finds its seed and the bus's CA
NODE_AGENTS = {"alnair-device-plugin", "alnair-exporter", "alnair-dataset-csi"}
# The one privileged container: its FUSE mounts reach pods' volumes through Bidirectional
# mount propagation, which Kubernetes allows privileged containers only.
PRIVILEGED = {("alnair-dataset-csi", "dataset-csi")}
BROAD_ROLES = {"cluster-admin", "admin", "edit"}


def service_class(service_dir: str) -> type[Service]:
    package = service_package(REPO / "services" / service_dir)
    module = importlib.import_module(package.module)
    services = [obj for name in module.__all__ if isinstance(obj := getattr(module, name), type)
                and issubclass(obj, Service)]
    assert len(services) == 1, f"{package.module} should export one Service subclass, exports {services}"
    return services[0]


def settings_class(service_dir: str) -> type:
    return service_class(service_dir).settings_class


def bus_role(workload_name: str) -> str:
    """The bus identity a deployed service connects as: its Service's name (Bus.connect's role)."""
    return service_class(SERVICES[workload_name]).name


def secret_values(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, str]]:
    import base64

    return {d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}
            for d in docs if d["kind"] == "Secret"}


def resolved_env(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (downward API with sample values)."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:  # $(NAME) of a variable defined above is expanded, as the kubelet does
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), var["value"])
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            downward = {"spec.nodeName": "gpu-node-1", "metadata.name": "pod-0", "metadata.namespace": NAMESPACE}
            env[var["name"]] = downward[source["fieldRef"]["fieldPath"]]
        else:
            ref = source["secretKeyRef"]
            assert ref["name"] in secrets and ref["key"] in secrets[ref["name"]], (
                f"{container['name']}: {var['name']} reads key {ref['key']!r} of Secret {ref['name']!r}, "
                f"which the dev overlay does not generate")
            env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_lives_in_the_alnair_namespace(overlay: str) -> None:
    for doc in render(overlay):
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], f"{where} is cluster-scoped but has a namespace"
        else:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{where} is not in {NAMESPACE}"
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "alnair", f"{where}: no part-of"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_runs_once_with_probes_resources_and_metrics(overlay: str) -> None:
    docs = render(overlay)
    names = [w["metadata"]["name"] for w in workloads(docs)]
    for service in SERVICES:
        assert names.count(service) == 1, f"{overlay}: {service} deployed {names.count(service)} times"
        workload = next(w for w in workloads(docs) if w["metadata"]["name"] == service)
        expected_kind = "DaemonSet" if service in NODE_AGENTS else "Deployment"
        assert workload["kind"] == expected_kind, f"{service} should be a {expected_kind}"
        container = main_container(workload)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        metrics_port = HEALTH_PORT
        if service == "alnair-exporter":  # its own /metrics server (ALNAIR_METRICS_PORT)
            env = {e["name"]: e.get("value") for e in container["env"]}
            metrics_port = int(env["ALNAIR_METRICS_PORT"])
            assert env["ALNAIR_METRICS_HOST"] == "0.0.0.0" and ports.pop("metrics") == metrics_port
        if service == "alnair-admission-webhook":  # the HTTPS endpoint the API server calls
            listen = {e["name"]: e.get("value") for e in container["env"]}["ALNAIR_LISTEN_PORT"]
            assert ports.pop("webhook") == int(listen), service
        assert ports == {"health": HEALTH_PORT}, f"{service}: ports {ports}"
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}, service
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}, service
        for part in ("requests", "limits"):
            assert set(container["resources"][part]) == {"cpu", "memory"}, f"{service}: resources.{part} incomplete"
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port),
                               "prometheus.io/path": "/metrics"}, f"{service}: scrape annotations {annotations}"


def mounted_config(workload: dict[str, Any], docs: tuple[dict[str, Any], ...], path: str, tmp: Path) -> Path:
    """The file at ``path`` in the container, from the ConfigMap volume mounted over it."""
    container = main_container(workload)
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"])
    config_map = find(docs, "ConfigMap", volume["configMap"]["name"])
    local = tmp / Path(path).name
    local.write_text(config_map["data"][path[len(mount["mountPath"]) + 1:]])
    return local


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_service_environment_is_valid_settings(service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every ALNAIR_* variable is a setting of the service, and together they validate."""
    docs = render("dev")
    cls = settings_class(SERVICES[service])
    workload = find(docs, "Deployment" if service not in NODE_AGENTS else "DaemonSet", service)
    env = resolved_env(main_container(workload), secret_values(docs))
    file_values = {}
    if "ALNAIR_CONFIG" in env:  # the settings file, from its ConfigMap (load_settings reads it)
        env["ALNAIR_CONFIG"] = str(mounted_config(workload, docs, env["ALNAIR_CONFIG"], tmp_path))
        file_values = tomllib.loads(Path(env["ALNAIR_CONFIG"]).read_text())
    fields = {f"ALNAIR_{name.upper()}" for name in cls.model_fields} | {"ALNAIR_CONFIG"}
    unknown = sorted(k for k in env if k.startswith("ALNAIR_") and k not in fields)
    assert not any("$(" in v for v in env.values()), f"{service}: unexpanded variable in {env}"
    assert not unknown, f"{service}: {unknown} are not settings of {cls.__name__} (silently ignored at start-up)"
    for key in ("ALNAIR_NATS_URL", "ALNAIR_NATS_CREDENTIALS", "ALNAIR_NATS_TLS_CA", "ALNAIR_NODE_NAME",
                "ALNAIR_HEALTH_PORT", "ALNAIR_HEALTH_HOST"):
        assert key in env, f"{service}: {key} not set"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(cls)
    for key, value in file_values.items():
        assert getattr(settings, key) == value, f"{service}: {key} from the config file not applied"
    assert settings.health_port == HEALTH_PORT and settings.health_host == "0.0.0.0"
    assert settings.nats_servers == ["tls://alnair-nats:4222"]
    assert settings.nats_credentials == Path(BUS_MOUNT, "seed") and settings.nats_tls_ca == Path(BUS_MOUNT, "ca.crt")
    assert settings.node_name == "gpu-node-1"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_is_least_privilege(overlay: str) -> None:
    docs = render(overlay)
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    for role in roles.values():
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard {field} {rule}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), role["metadata"]["name"]
            if role["metadata"]["name"] == "alnair-admission-webhook" and role["kind"] == "Role":
                # its own TLS Secret only: create (RBAC cannot name what does not exist yet),
                # get and update by name
                assert rule["verbs"] == ["create"] or rule.get("resourceNames") == [
                    "alnair-admission-webhook-tls"], rule
                continue
            assert "secrets" not in rule["resources"], f"{role['metadata']['name']} may read secrets"
    bound: dict[str, set[tuple[str, str]]] = {}
    for binding in bindings:
        ref = binding["roleRef"]
        assert ref["name"] not in BROAD_ROLES, f"{binding['metadata']['name']} binds the built-in {ref['name']}"
        assert (ref["kind"], ref["name"]) in roles, f"{binding['metadata']['name']} binds a role the bundle lacks"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject.get("namespace", NAMESPACE) == NAMESPACE
            bound.setdefault(subject["name"], set()).add((ref["kind"], ref["name"]))
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    for workload in workloads(docs):
        spec, name = pod_spec(workload), workload["metadata"]["name"]
        account = spec.get("serviceAccountName")
        if name in BRAINS:
            assert account == name and accounts[name].get("automountServiceAccountToken") is False, name
            assert spec.get("automountServiceAccountToken") is False, f"{name}: a brain must not get a token"
            assert account not in bound, f"{name} is a brain but is bound to {bound[account]}"
        elif account is None:
            assert spec.get("automountServiceAccountToken") is False, f"{name}: default account with a token"
        else:
            assert account in accounts, f"{name} runs as ServiceAccount {account!r}, which the bundle lacks"
    csi = pod_spec(find(docs, "DaemonSet", "alnair-dataset-csi"))
    assert csi["automountServiceAccountToken"] is False and csi["serviceAccountName"] not in bound
    for agent in NODE_AGENTS - {"alnair-dataset-csi"}:  # the CSI plugin uses no API at all
        account = pod_spec(find(docs, "DaemonSet", agent))["serviceAccountName"]
        rules = [r for kind, role in bound[account] for r in roles[(kind, role)]["rules"]]
        assert rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}], f"{agent}: {rules}"
    bridge = pod_spec(find(docs, "Deployment", "alnair-kube-bridge"))["serviceAccountName"]
    granted = {(group, res, verb) for kind, role in bound[bridge] for r in roles[(kind, role)]["rules"]
               for group in r["apiGroups"] for res in r["resources"] for verb in r["verbs"]}
    # Exactly what the bridge uses, nothing more: the pod owners the profiler annotates
    # (alnair_common.annotations.OWNER_KINDS) get patch and nothing else, not even get.
    owners = {(api.rpartition("/")[0], plural, "patch") for (api, _kind), plural in OWNER_KINDS.items()}
    read = {"get", "list", "watch"}
    expected = ({("", "pods", v) for v in read | {"patch"}} | {("", "pods/binding", "create")}
                | {("", "nodes", v) for v in read | {"patch"}} | {("", "events", "create")}
                | {("alnair.centaurus.io", "podgroups", v) for v in read | {"patch"}}
                | {("alnair.centaurus.io", "podgroups/status", v) for v in ("get", "patch")}
                | {("alnair.centaurus.io", "trainingjobs", v) for v in read | {"patch"}}
                | {("alnair.centaurus.io", "trainingjobs/status", "patch")}
                | {("alnair.centaurus.io", "datasets", v) for v in read | {"patch"}}
                | {("alnair.centaurus.io", "datasets/status", "patch")} | owners)
    assert granted == expected, (f"kube-bridge grants beyond its use: {sorted(granted - expected)}; "
                                 f"lacks: {sorted(expected - granted)}")
    assert ("batch", "jobs", "patch") in owners and ("apps", "replicasets", "patch") in owners


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_containers_are_confined(overlay: str) -> None:
    for workload in workloads(render(overlay)):
        spec = pod_spec(workload)
        name = workload["metadata"]["name"]
        assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC"), name
        for container in spec.get("initContainers", []) + spec["containers"]:
            sc = container["securityContext"]
            where = f"{name}/{container['name']}"
            if (name, container["name"]) in PRIVILEGED:
                assert sc["privileged"] is True and sc["readOnlyRootFilesystem"] is True, where
                assert not spec.get("automountServiceAccountToken", True), f"{where}: no API access"
                continue
            assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            if name in SERVICES:  # writable only where Tilt syncs sources (dev)
                read_only = overlay == "prod" or container["name"] == "install-interceptor"
                assert sc["readOnlyRootFilesystem"] is read_only, \
                    f"{overlay}: {where} readOnlyRootFilesystem={sc['readOnlyRootFilesystem']}"
            runs_as_root = sc.get("runAsUser", spec.get("securityContext", {}).get("runAsUser")) == 0
            assert not runs_as_root or name in NODE_AGENTS, f"{where} runs as root"
        volumes = [v for v in spec.get("volumes", []) if "hostPath" in v]
        assert not volumes or name in NODE_AGENTS, f"{name} mounts host paths {volumes}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_device_plugin_has_kubelet_sockets_workspaces_and_installs_the_interceptor(overlay: str) -> None:
    spec = pod_spec(find(render(overlay), "DaemonSet", "alnair-device-plugin"))
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host.values()) == {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources",
                                  "/var/lib/alnair/workspaces", "/opt/alnair/lib", "/var/run/alnair-mps"}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[next(k for k, v in host.items() if v.endswith("device-plugins"))] == "/var/lib/kubelet/device-plugins"
    (init,) = spec["initContainers"]
    assert init["image"].split("/")[-1].startswith("alnair-cuda-intercept")
    init_mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    entrypoint = (REPO / "native" / "cuda_intercept" / "Dockerfile").read_text()
    assert "/host/opt/alnair/lib" in init_mounts and "/host/opt/alnair/lib/" in entrypoint
    assert host[init_mounts["/host/opt/alnair/lib"]] == "/opt/alnair/lib"
    if overlay == "prod":
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(overlay: str) -> None:
    for workload in workloads(render(overlay)):
        spec = pod_spec(workload)
        for container in spec.get("initContainers", []) + spec["containers"]:
            image = container["image"]
            alnair = image.split("/")[-1].split(":")[0].startswith("alnair-")
            if alnair and overlay == "dev":
                assert ":" not in image, f"{image}: the dev overlay leaves tags to Tilt"
                continue
            repo, _, tag = image.rpartition(":")
            assert repo and tag and tag != "latest" and any(c.isdigit() for c in tag), f"{image} is not pinned"
            if alnair:
                assert "/" in repo, f"prod image {image} has no registry"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_stores_keep_their_data_on_volumes(overlay: str) -> None:
    docs = render(overlay)
    for name in ("alnair-nats", "alnair-mongodb", "alnair-prometheus", "alnair-redis"):
        sts = find(docs, "StatefulSet", name)
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        mounts = {m["name"] for m in main_container(sts)["volumeMounts"]}
        assert claim["metadata"]["name"] in mounts, f"{name}: the claim is not mounted"
    nats = main_container(find(docs, "StatefulSet", "alnair-nats"))
    assert {e["name"] for e in nats["env"]} == {"POD_NAME"}, "the bus's secrets are files, not environment"
    # The profiler's spool (profiles MongoDB has not taken yet) survives rescheduling.
    profiler = find(docs, "Deployment", "alnair-profiler")
    volumes = {v["name"]: v for v in profiler["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert find(docs, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert profiler["spec"]["strategy"]["type"] == "Recreate", "a RWO volume: one pod at a time"
    assert any(m["name"] == "data" and m["mountPath"] == "/var/lib/alnair"
               for m in main_container(profiler)["volumeMounts"])


def test_grafana_provisions_every_generated_dashboard() -> None:
    docs = render("prod")
    dashboards = next(d for d in docs if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"].startswith("alnair-grafana-dashboards"))
    files = {p.name: p.read_text() for p in (K8S / "base" / "grafana" / "dashboards").glob("*.json")}
    assert dashboards["data"] == files, "the dashboards ConfigMap must carry exactly grafana/dashboards/*.json"
    grafana = pod_spec(find(docs, "Deployment", "alnair-grafana"))
    volume = next(v for v in grafana["volumes"] if v["name"] == "dashboards")
    assert volume["configMap"]["name"] == dashboards["metadata"]["name"]


def test_device_plugin_settings_point_into_its_mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths the plugin uses (its defaults or the manifest's environment) are mounted there."""
    docs = render("prod")
    workload = find(docs, "DaemonSet", "alnair-device-plugin")
    container = main_container(workload)
    for var in container["env"]:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    settings = load_settings(settings_class("device_plugin"))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod_spec(workload)["volumes"] if "hostPath" in v}

    def mount_of(path: Path) -> dict[str, Any]:
        holders = [m for p, m in mounts.items() if path == Path(p) or Path(p) in path.parents]
        assert holders, f"{path} is not inside any mount of the device plugin"
        return max(holders, key=lambda m: len(m["mountPath"]))

    for path in (settings.device_plugin_dir, settings.state_dir, settings.workspace_root,
                 settings.pod_resources_socket.parent, settings.interceptor_host_path.parent, settings.mps_dir):
        mount = mount_of(path)
        assert host[mount["name"]] == mount["mountPath"], f"{path}: host and container paths differ"
    assert not mount_of(settings.state_dir).get("readOnly"), "the plugin's state must be writable"
    assert not mount_of(settings.device_plugin_dir).get("readOnly"), "the plugin creates its socket there"
    assert not mount_of(settings.mps_dir).get("readOnly"), "MPS mode makes each card's directories there"


def test_profiler_stores_profiles_in_the_bundle_mongodb(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render("dev")
    env = resolved_env(main_container(find(docs, "Deployment", "alnair-profiler")), secret_values(docs))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(settings_class("profiler"))
    assert settings.mongo_url == "mongodb://alnair:alnair-dev-password@alnair-mongodb:27017/?authSource=admin"
    mongo = main_container(find(docs, "StatefulSet", "alnair-mongodb"))
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in mongo["env"]} == {
        "MONGO_INITDB_ROOT_USERNAME": "mongo-username", "MONGO_INITDB_ROOT_PASSWORD": "mongo-password"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_stores_admit_every_alnair_pod_and_only_those(overlay: str) -> None:
    docs = render(overlay)
    policy = find(docs, "NetworkPolicy", "alnair-stores-from-alnair-only")
    guarded = set(policy["spec"]["podSelector"]["matchExpressions"][0]["values"])
    assert guarded == {"alnair-nats", "alnair-mongodb", "alnair-redis"}
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}, "only pods of the same namespace may be admitted"
    for workload in workloads(docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        for key, value in peer["podSelector"]["matchLabels"].items():
            assert labels.get(key) == value, f"{workload['metadata']['name']}'s pods would be cut off the bus"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_training_pods_reach_only_the_redis_client_port_as_their_namespaces_user(
        overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(overlay)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"] for p in policies} == {"alnair-stores-from-alnair-only",
                                                         "alnair-cache-readers"}
    readers = find(docs, "NetworkPolicy", "alnair-cache-readers")
    assert readers["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "alnair-redis"}}
    (rule,) = readers["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]  # not the cluster bus (16379)
    if overlay != "dev":
        return
    # The webhook and the hydrator derive the same users from the same key, for the same servers.
    secrets = secret_values(docs)
    env = {}
    for name in ("alnair-admission-webhook", "alnair-cache-hydrator"):
        env[name] = resolved_env(main_container(find(docs, "Deployment", name)), secrets)
    key = env["alnair-cache-hydrator"]["ALNAIR_CACHE_READER_KEY"]
    assert key and key == env["alnair-admission-webhook"]["ALNAIR_CACHE_READER_KEY"]
    for k, value in env["alnair-admission-webhook"].items():
        monkeypatch.setenv(k, value)
    webhook = load_settings(settings_class("admission_webhook"))
    pod_hosts = webhook.pod_tier_url.removeprefix("redis-cluster://").split(",")
    hydrator_hosts = env["alnair-cache-hydrator"]["ALNAIR_CACHE_TIER_URL"].partition("@")[2].split(",")
    assert [h.split(".")[0] for h in pod_hosts] == [h.split(".")[0] for h in hydrator_hosts]
    assert all(h.endswith(".alnair-redis.alnair-system.svc:6379") for h in pod_hosts)
    assert "@" not in webhook.pod_tier_url  # no credential for every pod


def test_scheduler_name_agrees_across_bridge_scheduler_and_examples(tmp_path: Path) -> None:
    docs = render("prod")
    scheduler = find(docs, "Deployment", "alnair-scheduler")
    env = {e["name"]: e.get("value") for e in main_container(scheduler)["env"]}
    config = tomllib.loads(mounted_config(scheduler, docs, env["ALNAIR_CONFIG"], tmp_path).read_text())
    bridge = {e["name"]: e.get("value") for e in main_container(find(docs, "Deployment", "alnair-kube-bridge"))["env"]}
    examples = [d for p in sorted((K8S / "examples").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
                if d and d["kind"] == "Pod"]
    names = {config["scheduler_name"], bridge["ALNAIR_SCHEDULER_NAME"], *(p["spec"]["schedulerName"] for p in examples)}
    assert names == {"alnair-scheduler"}, f"schedulerName disagrees: {names}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_dataset_csi_plugin_is_registered_where_the_kubelet_looks(
        overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from alnair_common.dataset_refs import CSI_DRIVER
    from alnair_dataset_csi import DatasetCsiSettings

    docs = render(overlay)
    driver = find(docs, "CSIDriver", CSI_DRIVER)["spec"]
    assert driver["podInfoOnMount"] is True  # the namespace comes from the kubelet
    assert driver["volumeLifecycleModes"] == ["Ephemeral"] and driver["attachRequired"] is False
    daemon = find(docs, "DaemonSet", "alnair-dataset-csi")
    spec = pod_spec(daemon)
    registrar, plugin = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    socket_dir = volumes["plugin-dir"]["hostPath"]["path"]
    assert socket_dir == f"/var/lib/kubelet/plugins/{CSI_DRIVER}"
    assert f"--kubelet-registration-path={socket_dir}/csi.sock" in registrar["args"]
    mounts = {m["name"]: m for m in plugin["volumeMounts"]}
    assert mounts["pods"]["mountPropagation"] == "Bidirectional"
    webhook_env = {e["name"]: e.get("value") for e in
                   main_container(find(docs, "Deployment", "alnair-admission-webhook"))["env"]}
    assert webhook_env["ALNAIR_POD_S3_GATEWAY_IMAGE"] == plugin["image"]  # the S3 gateway sidecar's image
    assert volumes["pods"]["hostPath"]["path"] == "/var/lib/kubelet/pods"
    if overlay == "dev":
        for key, value in resolved_env(plugin, secret_values(docs)).items():
            monkeypatch.setenv(key, value)
        settings = DatasetCsiSettings()
        assert settings.socket_path == f"{mounts['plugin-dir']['mountPath']}/csi.sock"
        assert settings.cache_reader_key.get_secret_value()
        webhook = resolved_env(main_container(find(docs, "Deployment", "alnair-admission-webhook")),
                               secret_values(docs))
        assert settings.pod_tier_url == webhook["ALNAIR_POD_TIER_URL"]  # the same tier pods read
