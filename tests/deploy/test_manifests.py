"""The Kubernetes manifests, checked rather than hoped: each overlay rendered by Kustomize
(the kubectl wheel), every object validated against the Kubernetes API's schemas
(kubernetes-validate) and KEDA's against the CRDs kept in deploy/crds/, and the
manifests held to what the code needs: the variables the settings read, commands that
exist, selectors that pick one Deployment's pods, a grace period longer than the
longest atomic job, the hook runner's rights in its own namespace only, and autoscaler
queries that are the ones /metrics shows (run against the real schema)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["dev", "prod"]
# The oldest Kubernetes the manifests are written for (a preStop `sleep` action) and the
# newest the validator knows.
KUBERNETES_VERSIONS = ["1.30", kubernetes_validate.latest_version()]
# The Secrets the manifests reference by name, with their keys; their values live outside
# this repository (docs/deploy.md says how to create them). Stand-ins for the checks below.
SECRETS = {
    "conveyor-secrets": {
        "SECRET_KEY": "k" * 60,
        "DATABASE_URL": "postgresql://conveyor@postgres.invalid:5432/conveyor",
        "REDIS_URL": "redis://redis.invalid:6379/0",
        "METRICS_TOKEN": "metrics-token",
        "EXPORTS_WORKER_TOKEN": "worker-token",
    },
    "conveyor-export-worker": {
        "EXPORTS_TRINO_URL": "https://trino.invalid:443",
        "EXPORTS_TRINO_USER": "conveyor",
        "EXPORTS_TRINO_PASSWORD": "secret",
        "EXPORTS_POSTGRES_URL": "postgresql://conveyor_reader@postgres.invalid/conveyor",
    },
    "conveyor-keda": {"connection": "postgresql://conveyor_keda@postgres.invalid/conveyor"},
}
# What the image's Dockerfile sets for every process.
IMAGE_ENV = {"DJANGO_SETTINGS_MODULE": "project.settings", "CONVEYOR_VAR_DIR": "/var/lib/conveyor"}


def kubectl() -> str:
    beside = Path(sys.executable).with_name("kubectl")
    return str(beside) if beside.exists() else shutil.which("kubectl") or "kubectl"


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered(overlay) if doc["kind"] == kind]


def named(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for doc in objects(overlay, kind) if doc["metadata"]["name"] == name]
    return found


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def workloads(overlay: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered(overlay) if doc["kind"] in {"Deployment", "Job", "CronJob"}]


def containers(overlay: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (workload, container)
        for workload in workloads(overlay)
        for container in pod_spec(workload).get("initContainers", []) + pod_spec(workload)["containers"]
    ]


def config_map(overlay: str, name: str) -> dict[str, str]:
    (found,) = [
        doc for doc in objects(overlay, "ConfigMap") if doc["metadata"]["name"].rsplit("-", 1)[0] == name
    ]
    return found["data"]


def app_namespace(overlay: str) -> str:
    """The namespace Conveyor's own pods run in."""
    return named(overlay, "Deployment", "conveyor-web")["metadata"]["namespace"]


def hooks_namespace(overlay: str) -> str:
    """The namespace hook pods run in, as the hook runner is told."""
    return config_map(overlay, "conveyor-config")["INGEST_KUBE_NAMESPACE"]


def container_env(overlay: str, container: dict[str, Any]) -> dict[str, str]:
    """The environment a container starts with, secrets replaced by stand-ins."""
    maps = {doc["metadata"]["name"]: doc["data"] for doc in objects(overlay, "ConfigMap")}
    env = dict(IMAGE_ENV)
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps[source["configMapRef"]["name"]])
        else:
            env.update(SECRETS[source["secretRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item["valueFrom"]:  # the downward API: the pod's own namespace
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[item["name"]] = app_namespace(overlay)
        elif "configMapKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["configMapKeyRef"]
            env[item["name"]] = maps[ref["name"]][ref["key"]]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = SECRETS[ref["name"]][ref["key"]]
    return env


# --- schemas ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_for_the_kubernetes_api(overlay, version):
    checked = 0
    for doc in rendered(overlay):
        if doc["apiVersion"].startswith("keda.sh/"):
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 15


def test_the_validator_refuses_a_misspelt_field():
    web = copy.deepcopy(named("prod", "Deployment", "conveyor-web"))
    pod_spec(web)["containers"][0]["readinessProbe"]["httpGet"]["prot"] = 8000
    with pytest.raises(kubernetes_validate.ValidationError, match="prot"):
        kubernetes_validate.validate(web, KUBERNETES_VERSIONS[0], strict=True)


def closed(schema: Any) -> Any:
    """A CRD's schema as the API server applies it with strict field validation: an
    object with listed properties takes no others (unless it preserves unknown fields)."""
    if isinstance(schema, dict):
        schema = {key: closed(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


@cache
def keda_schema(kind: str) -> dict[str, Any]:
    for path in (DEPLOY / "crds" / "keda").glob("*.yaml"):
        (crd,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        if crd["spec"]["names"]["kind"] == kind:
            (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
            return closed(version["schema"]["openAPIV3Schema"])
    raise LookupError(kind)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_keda_objects_are_valid_for_keda(overlay):
    keda = [doc for doc in rendered(overlay) if doc["apiVersion"] == "keda.sh/v1alpha1"]
    assert {doc["kind"] for doc in keda} == {"ScaledObject", "TriggerAuthentication"}
    for doc in keda:
        jsonschema.validate(doc, keda_schema(doc["kind"]))


def test_the_keda_schema_refuses_a_misspelt_field():
    scaler = copy.deepcopy(objects("prod", "ScaledObject")[0])
    scaler["spec"]["minReplicas"] = 0
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(scaler, keda_schema("ScaledObject"))


# --- the objects hold together -----------------------------------------------------------


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_selector_picks_the_pods_of_one_workload(overlay):
    deployments = objects(overlay, "Deployment")
    templates = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in deployments}
    for deployment in deployments:
        picked = [
            name
            for name, labels in templates.items()
            if selects(deployment["spec"]["selector"]["matchLabels"], labels)
        ]
        assert picked == [deployment["metadata"]["name"]]
    budgets = objects(overlay, "PodDisruptionBudget")
    assert {b["metadata"]["name"] for b in budgets} == set(templates)
    for budget in budgets:
        picked = [
            name
            for name, labels in templates.items()
            if selects(budget["spec"]["selector"]["matchLabels"], labels)
        ]
        assert picked == [budget["metadata"]["name"]]
    (service,) = objects(overlay, "Service")
    assert [name for name, labels in templates.items() if selects(service["spec"]["selector"], labels)] == [
        "conveyor-web"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_name_a_manifest_refers_to_exists_or_is_a_documented_secret(overlay):
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in rendered(overlay)}
    for workload in workloads(overlay):
        assert ("ServiceAccount", pod_spec(workload)["serviceAccountName"]) in names
    for _, container in containers(overlay):
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                assert ("ConfigMap", source["configMapRef"]["name"]) in names
            else:
                assert source["secretRef"]["name"] in SECRETS
        container_env(overlay, container)  # every key it names is known
    for scaler in objects(overlay, "ScaledObject"):
        assert ("Deployment", scaler["spec"]["scaleTargetRef"]["name"]) in names
        for trigger in scaler["spec"]["triggers"]:
            assert ("TriggerAuthentication", trigger["authenticationRef"]["name"]) in names
    for auth in objects(overlay, "TriggerAuthentication"):
        for ref in auth["spec"]["secretTargetRef"]:
            assert ref["key"] in SECRETS[ref["name"]]
    assert not objects(overlay, "Secret"), "secret values do not belong in the repository"


def test_the_secrets_and_their_keys_are_documented():
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for name, keys in SECRETS.items():
        assert f"`{name}`" in guide
        for key in keys:
            assert f"`{key}`" in guide, key


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_sized_and_unprivileged(overlay):
    for workload, container in containers(overlay):
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
        assert "memory" in resources["limits"], container["name"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        user = pod_spec(workload)["securityContext"]
        assert user["runAsNonRoot"] is True and user["runAsUser"] == 10001


def test_the_image_runs_as_the_user_the_pods_name():
    assert re.search(r"^USER 10001:10001$", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_what_a_process_writes_is_on_a_writable_volume(overlay):
    for _, container in containers(overlay):
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert "/tmp" in mounts, container["name"]  # uploads spool there
        env = container_env(overlay, container)
        for name in ("JOBS_DRAIN_FILE", "PROMETHEUS_MULTIPROC_DIR"):
            if env.get(name):
                assert any(env[name].startswith(mount) for mount in mounts), (container["name"], name)


# --- the cluster --------------------------------------------------------------------------


def cluster_deployments(overlay: str) -> list[dict[str, Any]]:
    return [
        d for d in objects(overlay, "Deployment") if pod_spec(d)["containers"][0]["command"][-1] == "qcluster"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_cluster_groups_serve_every_queue_a_handler_uses(overlay):
    from jobs import registry

    served = [
        container_env(overlay, pod_spec(d)["containers"][0])["JOBS_QUEUES"].split(",")
        for d in cluster_deployments(overlay)
    ]
    flat = [queue for queues in served for queue in queues]
    assert len(flat) == len(set(flat)), "a queue served by two groups"
    handlers = [h for h in registry.all_handlers() if not h.name.startswith("tests.")]
    handler_queues = {h.queue for h in handlers if not h.remote}
    assert handler_queues <= set(flat), handler_queues - set(flat)
    # A remote type's queue is its remote workers' (the export workers' Deployment).
    assert {h.queue for h in handlers if h.remote} == {"exports"}
    assert "exports" not in flat


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_stopping_cluster_pod_outlasts_its_longest_atomic_job(overlay):
    from jobs import conf, registry

    for deployment in cluster_deployments(overlay):
        env = container_env(overlay, pod_spec(deployment)["containers"][0])
        default = float(env.get("JOBS_HANDLER_TIMEOUT_SECONDS", conf.handler_timeout_seconds.default))
        grace = float(env.get("JOBS_STUCK_GRACE_SECONDS", conf.stuck_grace_seconds.default))
        longest = max(
            h.timeout or default
            for h in registry.all_handlers()
            if h.atomic and not h.name.startswith("tests.")
        )
        assert pod_spec(deployment)["terminationGracePeriodSeconds"] > longest + grace


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_stopping_cluster_pod_stops_claiming_before_sigterm(overlay):
    for deployment in cluster_deployments(overlay):
        container = pod_spec(deployment)["containers"][0]
        hook = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
        assert f"open('{container_env(overlay, container)['JOBS_DRAIN_FILE']}', 'w')" in hook


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_hook_runner_may_manage_jobs_and_pods_in_the_hooks_namespace_only(overlay):
    assert not objects(overlay, "ClusterRole") and not objects(overlay, "ClusterRoleBinding")
    (role,) = objects(overlay, "Role")
    (binding,) = objects(overlay, "RoleBinding")
    namespace = hooks_namespace(overlay)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    rights = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rights == {
        ("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
        ("", "pods"): {"get", "list", "watch"},
        ("", "pods/log"): {"get"},
        ("", "events"): {"get", "list"},
    }
    # The cluster's pods, in Conveyor's namespace, hold the rights; nothing in Conveyor's
    # namespace is granted anything.
    accounts = {pod_spec(d)["serviceAccountName"] for d in cluster_deployments(overlay)}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": app_namespace(overlay)}
        for account in accounts
    ]
    # Hook pods name an account of their own namespace, which has no token and no rights.
    (hook_account,) = [
        account
        for account in objects(overlay, "ServiceAccount")
        if account["metadata"]["name"]
        == config_map(overlay, "conveyor-config")["INGEST_KUBE_SERVICE_ACCOUNT"]
    ]
    assert hook_account["metadata"]["namespace"] == namespace
    assert hook_account["automountServiceAccountToken"] is False


# --- the hooks' namespace and its traffic ------------------------------------------------

# Where the cluster's pods, Services, nodes and managed databases live, and the node's
# metadata service (169.254.169.254): no hook may reach any of them.
PRIVATE_RANGES = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
]
DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def policies(overlay: str, namespace: str) -> list[dict[str, Any]]:
    return [doc for doc in objects(overlay, "NetworkPolicy") if doc["metadata"]["namespace"] == namespace]


def selects_namespace(peer: dict[str, Any], namespace: str, own: str) -> bool:
    """Whether a NetworkPolicy peer (of a policy in ``own``) can be a pod of ``namespace``."""
    if "ipBlock" in peer:
        return False  # addresses: see the ipBlock checks
    if "namespaceSelector" not in peer:
        return namespace == own  # a podSelector alone: the policy's own namespace
    selector = peer["namespaceSelector"]
    if set(selector) - {"matchLabels"}:
        return True  # matchExpressions: assume the worst
    labels = {"kubernetes.io/metadata.name": namespace}
    return selects(selector.get("matchLabels", {}), labels)


def allowed_addresses(peer: dict[str, Any], address: str) -> bool:
    import ipaddress

    if "ipBlock" not in peer:
        return False
    ip = ipaddress.ip_address(address)
    block = peer["ipBlock"]
    return ip in ipaddress.ip_network(block["cidr"]) and not any(
        ip in ipaddress.ip_network(excepted) for excepted in block.get("except", [])
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hooks_run_in_a_namespace_of_their_own_that_enforces_the_restricted_standard(overlay):
    assert hooks_namespace(overlay) != app_namespace(overlay)
    namespace = named(overlay, "Namespace", hooks_namespace(overlay))
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted", mode


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hook_pods_are_denied_every_connection_in_and_out_by_default(overlay):
    mine = policies(overlay, hooks_namespace(overlay))
    defaults = [
        p
        for p in mine
        if p["spec"]["podSelector"] == {}
        and set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    assert defaults, "no default deny in the hooks' namespace"
    assert not any(p["spec"].get("ingress") for p in mine), "something may connect to hooks"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hook_pods_may_reach_dns_and_the_public_internet_only(overlay):
    rules = [
        rule for p in policies(overlay, hooks_namespace(overlay)) for rule in p["spec"].get("egress", [])
    ]
    assert rules
    for rule in rules:
        assert rule.get("to"), "an egress rule without peers allows every destination"
        for peer in rule["to"]:
            if "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"] == "0.0.0.0/0"
                assert set(PRIVATE_RANGES) <= set(peer["ipBlock"]["except"])
            else:
                assert peer == DNS
                assert sorted((p["protocol"], p["port"]) for p in rule["ports"]) == [("TCP", 53), ("UDP", 53)]
    peers = [peer for rule in rules for peer in rule["to"]]
    for address in (
        "169.254.169.254",
        "10.0.0.1",
        "10.96.0.10",
        "172.20.3.4",
        "192.168.1.10",
        "100.64.0.5",
        "127.0.0.1",
    ):
        assert not any(allowed_addresses(peer, address) for peer in peers), address
    assert any(allowed_addresses(peer, "142.250.74.110") for peer in peers)  # object storage


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_nothing_in_the_hooks_namespace_may_reach_conveyors_pods(overlay):
    app, hooks = app_namespace(overlay), hooks_namespace(overlay)
    # Out of the hooks' namespace: no peer is a pod of Conveyor's (its pod addresses are
    # private, which the ipBlocks except: above).
    for policy in policies(overlay, hooks):
        for rule in policy["spec"].get("egress", []):
            assert not any(selects_namespace(peer, app, hooks) for peer in rule["to"])
    # Into Conveyor's namespace: denied by default, and no rule admits a hook pod, nor an
    # address range (a pod's address is in one).
    mine = policies(overlay, app)
    assert any(
        p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Ingress"]
        and not p["spec"].get("ingress")
        for p in mine
    ), "no default deny for Conveyor"
    for policy in mine:
        assert "Ingress" in policy["spec"]["policyTypes"]
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), f"{policy['metadata']['name']} admits everyone"
            for peer in rule["from"]:
                assert "ipBlock" not in peer
                assert not selects_namespace(peer, hooks, app), policy["metadata"]["name"]
    # Conveyor's own pods still reach each other (the export workers call the web Service).
    assert any(
        selects_namespace(peer, app, app)
        for p in mine
        for rule in p["spec"].get("ingress", [])
        for peer in rule["from"]
    )


# --- the autoscalers ----------------------------------------------------------------------


def scaler_queries(overlay: str) -> dict[str, str]:
    return {
        s["spec"]["scaleTargetRef"]["name"]: s["spec"]["triggers"][0]["metadata"]["query"]
        for s in objects(overlay, "ScaledObject")
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_scaler_asks_what_metrics_shows_for_its_deployment(overlay):
    from exports.metrics import UNFINISHED_JOBS_SQL
    from jobs.scaling import due_jobs_query

    queries = scaler_queries(overlay)
    clusters = cluster_deployments(overlay)
    assert set(queries) == {d["metadata"]["name"] for d in clusters} | {"conveyor-export-worker"}
    for deployment in clusters:
        queues = container_env(overlay, pod_spec(deployment)["containers"][0])["JOBS_QUEUES"]
        assert queries[deployment["metadata"]["name"]] == due_jobs_query(queues.split(","))
    assert queries["conveyor-export-worker"] == UNFINISHED_JOBS_SQL
    exporter = named(overlay, "ScaledObject", "conveyor-export-worker")["spec"]
    assert (exporter["minReplicaCount"], exporter["cooldownPeriod"]) == (0, 300)
    assert exporter["triggers"][0]["metadata"]["targetQueryValue"] == "10"
    # Every cluster pod runs the scheduler and the reaper: one must always run.
    assert named(overlay, "ScaledObject", "conveyor-cluster")["spec"]["minReplicaCount"] >= 1


@pytest.mark.django_db
def test_the_scaler_queries_run_as_a_role_that_may_read_two_tables():
    """Against the real schema, as the read-only role docs/deploy.md creates: each query
    answers, and what it answers is what /metrics shows."""
    from datetime import timedelta

    from django.utils import timezone

    from console.prometheus import metrics_registry
    from jobs import engine
    from jobs.models import Job

    engine.enqueue_many("tests.record", [{"n": n} for n in range(3)])
    engine.enqueue("tests.record", {"n": 9}, queue="maintenance")
    later = engine.enqueue("tests.record", {"n": 10})
    # Due before this test's transaction began: now() in SQL is its start.
    Job.objects.update(run_after=timezone.now() - timedelta(minutes=1))
    Job.objects.filter(pk=later.pk).update(run_after=timezone.now() + timedelta(hours=1))
    role = f"conveyor_keda_test_{os.getpid()}"
    answers: dict[str, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        try:
            cursor.execute(f"GRANT SELECT ON jobs_job, exports_exportjob TO {role}")
            cursor.execute(f"SET LOCAL ROLE {role}")
            for target, query in scaler_queries("prod").items():
                cursor.execute(query)
                answers[target] = cursor.fetchone()[0]
            cursor.execute("RESET ROLE")
        finally:
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")
    shown = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in metrics_registry().collect()
        for sample in family.samples
    }
    assert answers["conveyor-cluster"] == shown[("conveyor_jobs_due", (("queue", "default"),))] == 3
    assert (
        answers["conveyor-cluster-maintenance"]
        == shown[("conveyor_jobs_due", (("queue", "maintenance"),))]
        == 1
    )
    assert answers["conveyor-export-worker"] == shown[("conveyor_export_jobs_unfinished", ())] == 0


# --- commands and environment -------------------------------------------------------------


def probe(env: dict[str, str], argv: list[str]) -> dict[str, Any]:
    env = dict(env)
    if env.get("PROMETHEUS_MULTIPROC_DIR"):  # the pod's emptyDir: here, somewhere that exists
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="conveyor-metrics-")
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("settings_probe.py")), *argv],
        env={"PATH": os.environ["PATH"], **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def command_of(container: dict[str, Any]) -> list[str]:
    """The management command and its arguments, or [] for ``python -m``/``-c``."""
    command = [*container["command"], *container.get("args", [])]
    assert command[0] == "python", command
    if command[1] == "manage.py":
        return command[2:]
    assert command[1] == "-m" and command[2] == "project.web", command
    return []


@cache
def probed(overlay: str) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """Each distinct container's name, environment and probe results."""
    seen, found = set(), []
    for workload, container in containers(overlay):
        env = container_env(overlay, container)
        argv = command_of(container)
        key = (json.dumps(env, sort_keys=True), tuple(argv))
        if key not in seen:
            seen.add(key)
            found.append((f"{workload['metadata']['name']}/{container['name']}", env, probe(env, argv)))
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_command_exists_and_takes_its_arguments(overlay):
    """The probe loads each management command and parses the container's arguments with
    it; ``python -m project.web`` and the preStop hooks are checked here."""
    assert probed(overlay)
    import project.web

    assert callable(project.web.main)
    for _, container in containers(overlay):
        hook = container.get("lifecycle", {}).get("preStop", {}).get("exec")
        if hook:
            assert hook["command"][:2] == ["python", "-c"]
            compile(hook["command"][2], "preStop", "exec")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_the_manifests_set_is_one_the_code_reads(overlay):
    for name, env, found in probed(overlay):
        unread = set(env) - set(found["read"]) - {"PYTHONUNBUFFERED"}
        assert not unread, f"{name} sets {sorted(unread)}, which nothing reads"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_manifests_make_a_production_configuration(overlay):
    """Every variable the settings read is set or has a default; these are the ones whose
    default is for a laptop, and must be set in a deployment."""
    https = overlay == "prod"
    for name, env, found in probed(overlay):
        settings = found["settings"]
        assert settings["DEBUG"] is False, name
        assert settings["development_secret"] is False, name
        assert settings["STATIC_ROOT"] == "/var/lib/conveyor/static", name
        if "export-worker" in name:
            # Conveyor's own database is not the worker's to open.
            assert "DATABASE_URL" not in env and env["EXPORTS_POSTGRES_URL"], name
            continue
        assert settings["HTTPS_ONLY"] is https, name
        assert settings["embedded_database"] is False and settings["redis"], name
        assert settings["hook_runner"] == "kubernetes", name
        # The export workers and Prometheus call the web Service by its name, over HTTP.
        assert settings["service_host_allowed"], name
        exempt = [re.compile(pattern) for pattern in settings["redirect_exempt"]]
        for path in ("metrics", "internal/exports/claim"):
            assert any(p.search(path) for p in exempt), (name, path)
        for variable in ("INTAKE_STAGING_URL", "EXPORTS_STORAGE_URL", "INGEST_FILE_ROOTS"):
            assert "://" in env[variable], (name, variable)  # object storage every pod sees
