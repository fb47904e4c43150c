"""deploy/k8s for production, read as Kubernetes and Prometheus read it: every workload
has a disruption budget that lets a drain through, spreads its replicas (the
materializer's never share a node), runs hardened (non-root, read-only root, no
capabilities, RuntimeDefault seccomp) with somewhere to write, and is scraped by a
PodMonitor and fenced by a NetworkPolicy; the NATS exporter is on; every metric an
alert rule or a dashboard panel reads is one the actors export; and the rules pass
``promtool check rules`` and ``promtool test rules`` (promtool ships in Debian's
``prometheus`` package, which .ci/run installs)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.test_deploy import K8S, Object, _command_line, _objects, _workloads
from worldline.actors.registry import build
from worldline.actors.runtime.lease import LeaseGate
from worldline.actors.runtime.metrics import Registry, render

if TYPE_CHECKING:
    from pathlib import Path

ACTORS: Final = {"extractor", "fusion", "materializer", "projector", "simulator"}
HOSTNAME: Final = "kubernetes.io/hostname"
DASHBOARD: Final = K8S / "dashboards" / "worldline.json"
# Series Prometheus itself adds per scrape target, not exported by any process.
SCRAPE_SERIES: Final = {"up"}


def _pod(workload: Object) -> Object:
    template: Object = workload["spec"]["template"]
    return template


def _selects(selector: Object, labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels, matchExpressions) matches."""
    if selector.get("matchLabels", {}).items() - labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def test_the_selector_matcher_reads_both_forms() -> None:
    labels = {"app.kubernetes.io/component": "fusion", "tier": "x"}
    assert _selects({"matchLabels": {"tier": "x"}}, labels)
    assert not _selects({"matchLabels": {"tier": "y"}}, labels)
    expr = {"key": "app.kubernetes.io/component", "operator": "In"}
    assert _selects({"matchExpressions": [{**expr, "values": ["fusion"]}]}, labels)
    assert not _selects({"matchExpressions": [{**expr, "values": ["other"]}]}, labels)


def _actors() -> list[Object]:
    """The actor workloads (others, such as a gateway, serve people and agents and
    have their own network and monitoring rules)."""
    return [w for w in _workloads() if w["metadata"]["name"] in ACTORS]


def _pods_by_workload() -> dict[str, tuple[str, dict[str, str]]]:
    return {
        w["metadata"]["name"]: (
            w["metadata"]["namespace"],
            _pod(w)["metadata"]["labels"],
        )
        for w in _workloads()
    }


# --- disruption budgets, spread ------------------------------------------------------


def test_every_workload_has_one_disruption_budget_that_lets_a_drain_through() -> None:
    budgets = _objects("PodDisruptionBudget")
    pods = _pods_by_workload()
    assert set(pods) >= ACTORS
    for workload in _workloads():
        name = workload["metadata"]["name"]
        namespace, labels = pods[name]
        mine = [
            b
            for b in budgets
            if b["metadata"]["namespace"] == namespace
            and _selects(b["spec"]["selector"], labels)
        ]
        assert len(mine) == 1, f"{name}: {len(mine)} PodDisruptionBudgets select it"
        spec = mine[0]["spec"]
        # A budget no eviction can satisfy blocks every node drain for good.
        if "maxUnavailable" in spec:
            assert isinstance(spec["maxUnavailable"], int), name
            assert spec["maxUnavailable"] >= 1, name
        else:
            assert spec["minAvailable"] < workload["spec"]["replicas"], name
        # It selects no other workload's pods.
        for other, (other_ns, other_labels) in pods.items():
            if other != name and other_ns == namespace:
                assert not _selects(spec["selector"], other_labels), (name, other)


def _spread_rules(workload: Object) -> list[tuple[str, Object, bool]]:
    """(topology key, label selector, required) of each spread or anti-affinity."""
    spec = _pod(workload)["spec"]
    rules = [
        (
            c["topologyKey"],
            c["labelSelector"],
            c["whenUnsatisfiable"] == "DoNotSchedule",
        )
        for c in spec.get("topologySpreadConstraints", [])
    ]
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    rules += [
        (term["topologyKey"], term["labelSelector"], True)
        for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
    ]
    rules += [
        (
            w["podAffinityTerm"]["topologyKey"],
            w["podAffinityTerm"]["labelSelector"],
            False,
        )
        for w in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    return rules


def test_every_workload_spreads_over_nodes_and_materializers_never_share_one() -> None:
    for workload in _workloads():
        name = workload["metadata"]["name"]
        labels = _pod(workload)["metadata"]["labels"]
        on_hosts = [
            (selector, required)
            for key, selector, required in _spread_rules(workload)
            if key == HOSTNAME
        ]
        assert on_hosts, f"{name}: nothing spreads its pods over nodes"
        # Each rule counts this workload's own pods.
        for selector, _ in on_hosts:
            assert _selects(selector, labels), name
    (materializer,) = [
        w for w in _workloads() if w["metadata"]["name"] == "materializer"
    ]
    anti = _pod(materializer)["spec"]["affinity"]["podAntiAffinity"]
    required = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(t["topologyKey"] == HOSTNAME for t in required), (
        "the materializer's writer and standby must not share a node"
    )


# --- hardening -----------------------------------------------------------------------


def _config_env() -> dict[str, str]:
    (config,) = [
        o for o in _objects("ConfigMap") if o["metadata"]["name"] == "worldline-env"
    ]
    data: dict[str, str] = config["data"]
    return data


def test_every_container_runs_hardened_with_somewhere_to_write() -> None:
    dockerfile = (K8S / "Dockerfile").read_text()
    (image_user,) = re.findall(r"^USER (\d+)$", dockerfile, re.MULTILINE)
    data = _config_env()["WORLDLINE_DATA"]
    for workload in _workloads():
        pod = _pod(workload)["spec"]
        pod_sc = pod.get("securityContext", {})
        actor = workload["metadata"]["name"] in ACTORS
        if actor:  # actors call no Kubernetes API
            assert pod.get("automountServiceAccountToken") is False, workload[
                "metadata"
            ]
        for container in pod["containers"]:
            where = f"{workload['metadata']['name']}/{container['name']}"
            sc = container.get("securityContext", {})
            merged = {**pod_sc, **sc}  # the container's fields win
            assert merged.get("runAsNonRoot") is True, where
            assert str(merged.get("runAsUser")) == image_user, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("privileged", False) is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert merged.get("seccompProfile") == {"type": "RuntimeDefault"}, where
            # A read-only root: temporary files and an actor's store live on volumes.
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            writable = {data, "/tmp"} if actor else {"/tmp"}
            assert writable <= mounts, f"{where}: writable mounts {mounts}"


def test_the_startup_probe_waits_longer_than_the_liveness_probe() -> None:
    for workload in _workloads():
        for container in _pod(workload)["spec"]["containers"]:
            startup, live = container["startupProbe"], container["livenessProbe"]
            budget = startup["periodSeconds"] * startup["failureThreshold"]
            assert budget >= live["periodSeconds"] * live["failureThreshold"], workload[
                "metadata"
            ]["name"]


# --- monitoring ----------------------------------------------------------------------


def _pod_monitors() -> list[Object]:
    return _objects("PodMonitor")


def test_a_pod_monitor_scrapes_every_actor_where_it_serves_metrics() -> None:
    monitors = _pod_monitors()
    assert monitors
    assert {w["metadata"]["name"] for w in _actors()} == ACTORS
    for workload in _actors():
        namespace = workload["metadata"]["namespace"]
        labels = _pod(workload)["metadata"]["labels"]
        mine = [
            m
            for m in monitors
            if m["metadata"]["namespace"] == namespace
            and _selects(m["spec"]["selector"], labels)
        ]
        assert len(mine) == 1, workload["metadata"]["name"]
        for container in _pod(workload)["spec"]["containers"]:
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            words = shlex.split(_command_line(container))
            served = int(words[words.index("--metrics-port") + 1])
            endpoints = mine[0]["spec"]["podMetricsEndpoints"]
            assert any(
                ports.get(e["port"]) == served
                and e.get("path", "/metrics") == "/metrics"
                for e in endpoints
            ), workload["metadata"]["name"]


def test_the_nats_exporter_is_on_with_its_monitor() -> None:
    values = yaml.safe_load((K8S / "nats-values.yaml").read_text())
    exporter = values["promExporter"]
    assert exporter["enabled"] is True
    assert exporter["podMonitor"]["enabled"] is True
    # It reads the servers' monitoring endpoint.
    assert values["config"]["monitor"]["enabled"] is True


# --- network policy ------------------------------------------------------------------


def _policies_for(namespace: str, labels: dict[str, str]) -> list[Object]:
    return [
        p
        for p in _objects("NetworkPolicy")
        if p["metadata"]["namespace"] == namespace
        and _selects(p["spec"]["podSelector"], labels)
    ]


def _peer_namespace(peer: Object) -> dict[str, str]:
    labels: dict[str, str] = peer.get("namespaceSelector", {}).get("matchLabels", {})
    return labels


NS: Final = "kubernetes.io/metadata.name"


def test_actors_reach_nats_only_and_only_monitoring_reaches_them() -> None:
    assert {w["metadata"]["name"] for w in _actors()} == ACTORS
    for workload in _actors():
        namespace = workload["metadata"]["namespace"]
        name = workload["metadata"]["name"]
        policies = _policies_for(namespace, _pod(workload)["metadata"]["labels"])
        assert policies, f"{name}: no NetworkPolicy selects it"
        types = {t for p in policies for t in p["spec"]["policyTypes"]}
        assert types == {"Ingress", "Egress"}, name
        egress = [r for p in policies for r in p["spec"].get("egress", [])]
        reached: set[tuple[str, int]] = set()
        for rule in egress:
            assert rule.get("to"), f"{name}: an egress rule open to everywhere"
            assert rule.get("ports"), f"{name}: an egress rule on every port"
            for peer in rule["to"]:
                target = _peer_namespace(peer).get(NS, "?")
                for port in rule["ports"]:
                    reached.add((target, port["port"]))
        assert reached == {("nats", 4222), ("kube-system", 53)}, (name, reached)
        ingress = [r for p in policies for r in p["spec"].get("ingress", [])]
        assert ingress, name
        for rule in ingress:
            assert rule.get("from"), f"{name}: ingress open to everyone"
            assert {_peer_namespace(peer).get(NS) for peer in rule["from"]} == {
                "monitoring"
            }, name
            assert [p["port"] for p in rule["ports"]] == ["metrics"], name


def test_nats_takes_clients_from_worldline_and_agents_only() -> None:
    nats_pod = {"app.kubernetes.io/name": "nats"}
    policies = _policies_for("nats", nats_pod)
    assert policies
    # The actors' NATS URLs point at that namespace's servers.
    for url in _config_env()["WORLDLINE_NATS"].split(","):
        assert ".nats.svc" in url, url
    client_rules = [
        r
        for p in policies
        for r in p["spec"]["ingress"]
        if 4222 in {port["port"] for port in r["ports"]}
    ]
    assert client_rules
    peers = [peer for r in client_rules for peer in r["from"]]
    namespaces = [
        _peer_namespace(peer) for peer in peers if "namespaceSelector" in peer
    ]
    assert {NS: "worldline"} in namespaces
    assert {"worldline/agents": "true"} in namespaces
    # Every other port of the servers only for the servers or monitoring.
    for rule in (r for p in policies for r in p["spec"]["ingress"]):
        if rule in client_rules:
            continue
        for peer in rule["from"]:
            assert (
                _peer_namespace(peer).get(NS) == "monitoring"
                or peer.get("podSelector", {}).get("matchLabels") == nats_pod
            ), rule


# --- alert rules and dashboard: real metric names ------------------------------------


def _exported() -> tuple[set[str], set[str]]:
    """Every series name the actors expose and every label on them, read from a real
    rendering of every actor with every family filled (a heartbeat, a lease, a batch,
    an answer)."""
    registry = Registry()
    for name in sorted(ACTORS):
        spec = build(name, replica="a") if name == "materializer" else build(name)
        metrics = registry.actor(spec, now=datetime(2024, 1, 1, tzinfo=UTC))
        metrics.heartbeat_at = 1.0
        for durable, stats in metrics.inputs.items():
            stats.lag = 0
            metrics.record(durable, [True], 0.01)
        metrics.observe_rpc("before", 0.01)
        if spec.lease:
            metrics.lease = LeaseGate(spec.lease, spec.instance)
    samples = [
        sample
        for family in text_string_to_metric_families(render(registry))
        for sample in family.samples
    ]
    names = {sample.name for sample in samples}
    assert "worldline_lease_term" in names  # the materializer's lease is there
    return names, {label for sample in samples for label in sample.labels}


# Labels Prometheus adds to every series of a PodMonitor's targets (prometheus-
# operator), the one monitoring.yaml relabels in, and histograms' bucket bound.
TARGET_LABELS: Final = {
    "job",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "instance",
    "component",
    "le",
}


def label_names(expr: str) -> set[str]:
    """The label names a PromQL expression groups, joins or matches on."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    found: set[str] = set()
    for group in re.findall(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text
    ):
        found |= {w.strip() for w in group.split(",") if w.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", text):
        found |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    return found


KEYWORDS: Final = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not functions, keywords, labels,
    strings or durations)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries
    text = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text
    )
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match.group()
        if word.lower() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def test_metric_names_reads_what_an_expression_reads() -> None:
    expr = (
        'sum by (actor, le) (rate(worldline_apply_seconds_bucket{actor=~"$a"}'
        "[$__rate_interval])) > 0.5 and on (actor) up == 0 or vector(1e3)"
    )
    assert metric_names(expr) == {"worldline_apply_seconds_bucket", "up"}
    assert label_names(expr) == {"actor", "le"}


def _rules() -> list[Object]:
    (rule,) = _objects("PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    # A variable's label_values(SELECTOR, LABEL): the selector.
    exprs += [
        re.sub(r"^label_values\((.*),[^,]*\)$", r"\1", var["definition"])
        for var in board["templating"]["list"]
        if var["type"] == "query"
    ]
    return exprs


def test_every_alert_and_panel_reads_a_metric_the_actors_export() -> None:
    exported, labels = _exported()
    exported |= SCRAPE_SERIES
    labels |= TARGET_LABELS
    rules = _rules()
    alerts = {r["alert"] for r in rules}
    # What the alerts must watch (issue 28): lag, dead letters, lease changes,
    # stalled actors (no heartbeat, no progress).
    assert {
        "WorldlineConsumerLagHigh",
        "WorldlineDeadLetters",
        "WorldlineLeaseChanged",
        "WorldlineHeartbeatStale",
        "WorldlineNoProgress",
        "WorldlineInputStalled",
    } <= alerts
    exprs = [("alert " + r["alert"], r["expr"]) for r in rules]
    exprs += [("dashboard", e) for e in _dashboard_exprs()]
    used: set[str] = set()
    for where, expr in exprs:
        names = metric_names(expr)
        assert names, f"{where}: reads no metric? {expr!r}"
        unknown = names - exported
        assert not unknown, f"{where} reads {sorted(unknown)}, which nothing exports"
        unknown = label_names(expr) - labels
        assert not unknown, f"{where} uses labels {sorted(unknown)} no series has"
        used |= names
    # The labels the alerts' text and the panels' legends name exist too.
    texts = [v for r in rules for v in r.get("annotations", {}).values()] + [
        t.get("legendFormat", "")
        for p in json.loads(DASHBOARD.read_text())["panels"]
        for t in p.get("targets", [])
    ]
    named = {
        label
        for text in texts
        for pair in re.findall(r"\$labels\.(\w+)|\{\{\s*(\w+)\s*\}\}", text)
        for label in pair
        if label
    }
    assert named
    assert named <= labels, sorted(named - labels)
    # Lag, dead letters, lease, heartbeat, progress: each is charted and alerted on.
    for name in (
        "worldline_consumer_lag",
        "worldline_messages_dead_lettered_total",
        "worldline_lease_term",
        "worldline_heartbeat_time_seconds",
        "worldline_messages_applied_total",
    ):
        assert name in used, name


def test_the_alerts_scrape_job_is_the_pod_monitors() -> None:
    (monitor,) = _pod_monitors()
    job = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
    jobs = set()
    for expr in [r["expr"] for r in _rules()] + _dashboard_exprs():
        jobs |= set(re.findall(r'job="([^"]*)"', expr))
    assert jobs == {job}


def test_the_dashboard_is_importable_and_shipped_to_grafana() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"]
    assert board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        # Every panel reads the chosen data source.
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert "datasource" in variables
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    generated = [
        g
        for g in base.get("configMapGenerator", [])
        if g["name"] == "worldline-dashboard"
    ]
    assert generated
    assert generated[0]["files"] == [str(DASHBOARD.relative_to(K8S))]
    assert generated[0]["options"]["labels"]["grafana_dashboard"] == "1"


# --- promtool ------------------------------------------------------------------------


def _promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(
            "promtool is missing in CI: .ci/run installs Debian's `prometheus` "
            "package, which ships it"
        )
    pytest.skip(
        "promtool not installed (apt-get install prometheus; .ci/run does it in CI)"
    )


def _rules_file(tmp_path: Path, *, annotations: bool = True) -> Path:
    (rule,) = _objects("PrometheusRule")
    spec: dict[str, Any] = json.loads(json.dumps(rule["spec"]))
    if not annotations:  # unit tests compare labels; the text is checked by `check`
        for group in spec["groups"]:
            for r in group["rules"]:
                r.pop("annotations", None)
    path = tmp_path / "worldline-rules.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_alert_rules(tmp_path: Path) -> None:
    promtool = _promtool()
    done = _run([promtool, "check", "rules", str(_rules_file(tmp_path))])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(
        f'{k}="{v}"' for k, v in {"namespace": "worldline", **labels}.items()
    )
    return {"series": f"{name}{{{inner}}}", "values": values}


def _fires(alert: str, at: str, *expected: dict[str, str]) -> Object:
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [{"exp_labels": labels} for labels in expected],
    }


def test_promtool_unit_tests_fire_each_alert_on_what_it_watches(tmp_path: Path) -> None:
    """Synthetic series, one minute apart: each alert fires when its condition has
    held long enough, and not before or on healthy series."""
    promtool = _promtool()
    fusion = {"actor": "fusion", "durable": "fusion"}
    lease = {"lease": "materializer.p0of1"}
    m0, m1 = {"actor": "materializer-0", **lease}, {"actor": "materializer-1", **lease}
    ns = {"namespace": "worldline"}
    warning, critical = {"severity": "warning"}, {"severity": "critical"}
    series = [
        # fusion stalls at minute 2; a projector's durable applies until minute 10,
        # then stops with 5 waiting; fusion dead-letters one message at minute 3.
        _series("worldline_input_stalled", "0 0 1x30", **fusion),
        _series("worldline_consumer_lag", "5x40", actor="projector-0", durable="p"),
        _series(
            "worldline_messages_applied_total",
            "0+10x10 100x30",
            actor="projector-0",
            durable="p",
        ),
        _series(
            "worldline_messages_dead_lettered_total",
            "0x40",
            actor="projector-0",
            durable="p",
        ),
        _series("worldline_consumer_lag", "0x40", **fusion),
        _series("worldline_messages_applied_total", "0+10x40", **fusion),
        _series("worldline_messages_dead_lettered_total", "0 0 0 1x37", **fusion),
        # The extractor's heartbeats stop at 120 s; fusion's go on.
        _series("worldline_heartbeat_time_seconds", "0+60x2 120x30", actor="extractor"),
        _series("worldline_heartbeat_time_seconds", "0+60x40", actor="fusion"),
        # materializer-1 takes the lease over at minute 5 (term 1 -> 2); nobody holds
        # it from minute 20 on.
        _series("worldline_lease_term", "1x4 2x35", **m0),
        _series("worldline_lease_term", "1x4 2x35", **m1),
        _series("worldline_lease_held", "1x4 0x35", **m0),
        _series("worldline_lease_held", "0x4 1x14 0x20", **m1),
        _series("worldline_start_time_seconds", "0x40", actor="fusion"),
    ]
    tests = [
        _fires("WorldlineInputStalled", "3m"),  # stalled for 1 minute: not yet
        _fires("WorldlineInputStalled", "5m", {**critical, **ns, **fusion}),
        _fires("WorldlineDeadLetters", "2m"),
        _fires("WorldlineDeadLetters", "4m", {**warning, **ns, **fusion}),
        _fires("WorldlineHeartbeatStale", "2m"),
        _fires(
            "WorldlineHeartbeatStale", "5m", {**warning, **ns, "actor": "extractor"}
        ),
        _fires("WorldlineNoProgress", "25m"),  # no progress since minute 10: not yet
        _fires(
            "WorldlineNoProgress",
            "31m",
            {**critical, **ns, "actor": "projector-0", "durable": "p"},
        ),
        _fires("WorldlineLeaseChanged", "4m"),
        _fires("WorldlineLeaseChanged", "6m", {"severity": "info", **ns, **lease}),
        _fires("WorldlineLeaseChanged", "25m"),  # 15 minutes on: quiet again
        _fires("WorldlineNoLeaseHolder", "10m"),
        _fires("WorldlineNoLeaseHolder", "22m", {**critical, **ns, **lease}),
        _fires("WorldlineTwoLeaseHolders", "10m"),
        _fires("WorldlineActorsAbsent", "30m"),
        _fires("WorldlineConsumerLagHigh", "30m"),
    ]
    rules = _rules_file(tmp_path, annotations=False)
    spec = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}],
    }
    test_file = tmp_path / "worldline-rules-test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = _run([promtool, "test", "rules", str(test_file)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


# --- kustomize -----------------------------------------------------------------------


def test_kustomize_renders_the_base_with_the_dashboard() -> None:
    """``kubectl kustomize`` (kustomize built in) renders every object of the base and
    the dashboard's ConfigMap, byte for byte the JSON file."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: the manifests are read as YAML above")
    done = _run([kubectl, "kustomize", str(K8S)])
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert {(o["kind"], o["metadata"]["name"]) for o in _objects()} <= kinds
    (board,) = [o for o in rendered if o["metadata"]["name"] == "worldline-dashboard"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["data"]["worldline.json"] == DASHBOARD.read_text()
