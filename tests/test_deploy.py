"""The Kubernetes manifests and the image they run, read as Kubernetes reads them:
each StatefulSet's Service exists, each container is probed on a port it exposes and
serves, the kustomize base holds every manifest, the Dockerfile installs the lock.

Production pieces (tests/test_deploy_production.py): disruption budgets, spread,
hardening, the PodMonitor, the NetworkPolicy, the alert rules and the dashboard."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any, Final

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT: Final = Path(__file__).resolve().parents[1]
K8S: Final = ROOT / "deploy" / "k8s"
NOT_MANIFESTS: Final = {"kustomization.yaml", "nats-values.yaml"}  # kustomize; Helm

Object = dict[str, Any]


def _manifests() -> dict[str, list[Object]]:
    """Every Kubernetes object of deploy/k8s, by file."""
    found: dict[str, list[Object]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name in NOT_MANIFESTS:
            continue
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path.name
        found[path.name] = docs
    return found


def _objects(kind: str | None = None) -> list[Object]:
    return [
        o
        for docs in _manifests().values()
        for o in docs
        if kind is None or o["kind"] == kind
    ]


def _workloads() -> list[Object]:
    return [o for o in _objects() if o["kind"] in ("Deployment", "StatefulSet")]


def test_the_manifests_hold_every_actor() -> None:
    components = {o["metadata"]["name"] for o in _workloads()}
    assert components == {
        "extractor",
        "fusion",
        "materializer",
        "projector",
        "simulator",
        "gateway",  # MCP over HTTP and the console
    }


def test_every_statefulset_names_a_headless_service_that_selects_its_pods() -> None:
    services = {
        (s["metadata"]["namespace"], s["metadata"]["name"]): s
        for s in _objects("Service")
    }
    sets = _objects("StatefulSet")
    assert sets
    for sts in sets:
        key = (sts["metadata"]["namespace"], sts["spec"]["serviceName"])
        assert key in services, f"{sts['metadata']['name']}: no Service {key}"
        service = services[key]["spec"]
        assert service.get("clusterIP") == "None", key  # headless: per-pod DNS
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        assert service["selector"].items() <= pod_labels.items(), key
        assert sts["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        container_ports = {
            p["name"]
            for c in sts["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in service["ports"]:
            assert port["targetPort"] in container_ports, (key, port)


def _command_line(container: Object) -> str:
    return " ".join(container.get("command", []) + container.get("args", []))


def _probe_flags(words: list[str]) -> tuple[str, str]:
    """The options that place a container's /healthz: the gateway (``mcp --http``)
    serves it on its HTTP port, an actor on its metrics port."""
    if words[:1] == ["mcp"] and "--http" in words:
        return "--port", "--host"
    return "--metrics-port", "--metrics-host"


def test_every_container_is_probed_where_it_serves() -> None:
    workloads = _workloads()
    assert workloads
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            where = f"{workload['metadata']['name']}/{container['name']}"
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            for probe, path in (
                ("startupProbe", "/healthz"),
                ("livenessProbe", "/healthz"),
                ("readinessProbe", "/readyz"),
            ):
                assert probe in container, f"{where}: no {probe}"
                get = container[probe]["httpGet"]
                assert get["path"] == path, where
                port = get["port"]
                number = ports[port] if isinstance(port, str) else port
                assert number in ports.values(), f"{where}: {probe} port not exposed"
                # The actor (or the gateway) serves the probes there, everywhere.
                words = shlex.split(_command_line(container))
                port_flag, host_flag = _probe_flags(words)
                assert port_flag in words, where
                assert words[words.index(port_flag) + 1] == str(number), where
                assert words[words.index(host_flag) + 1] == "0.0.0.0", where


def test_the_kustomize_base_lists_every_manifest() -> None:
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert base["kind"] == "Kustomization"
    assert sorted(base["resources"]) == sorted(_manifests())
    assert all((K8S / name).is_file() for name in base["resources"])
    images = {i["name"] for i in base["images"]}
    used = {
        c["image"].split(":", 1)[0]
        for w in _workloads()
        for c in w["spec"]["template"]["spec"]["containers"]
    }
    assert used <= images


def _pyproject_dependencies() -> list[Requirement]:
    """The runtime dependencies and the mcp extra's (the image installs it)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    extra = project["optional-dependencies"]["mcp"]
    return [Requirement(r) for r in [*project["dependencies"], *extra]]


def test_the_lock_pins_every_runtime_dependency_within_its_range() -> None:
    pins: dict[str, str] = {}
    for line in (K8S / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line.strip())
        assert match, f"constraints.txt: not name==version: {line!r}"
        pins[canonicalize_name(match[1])] = match[2]
    for req in _pyproject_dependencies():
        name = canonicalize_name(req.name)
        assert name in pins, (
            f"{req.name} is a dependency but not in deploy/k8s/constraints.txt; "
            "regenerate it (deploy/README.md)"
        )
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside {req}; "
            "regenerate it (deploy/README.md)"
        )


def test_the_image_installs_the_lock() -> None:
    text = (K8S / "Dockerfile").read_text()
    installs = [
        line for line in text.splitlines() if re.search(r"\bpip install\b", line)
    ]
    assert installs
    for line in installs:
        assert "-c constraints.txt" in line, line
    assert "COPY deploy/k8s/constraints.txt ./" in text


def test_the_image_carries_the_gateway() -> None:
    text = (K8S / "Dockerfile").read_text()
    assert "-c constraints.txt '.[mcp]'" in text  # `mcp --http` needs the extra


def test_the_gateway_is_deployed_with_its_service() -> None:
    (deployment,) = [o for o in _workloads() if o["metadata"]["name"] == "gateway"]
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    words = shlex.split(_command_line(container))
    assert words[:2] == ["mcp", "--http"]
    # the tokens file lives on a mounted Secret, read-only
    tokens = words[words.index("--tokens") + 1]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (mount,) = [m for m in mounts.values() if tokens.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    assert "secret" in volumes[mount["name"]]
    # a non-loopback bind needs the names clients use (the Service's among them)
    (service,) = [s for s in _objects("Service") if s["metadata"]["name"] == "gateway"]
    allowed = words[words.index("--allowed-hosts") + 1].split(",")
    namespace = service["metadata"]["namespace"]
    assert f"gateway.{namespace}.svc.cluster.local" in allowed
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    assert "startupProbe" in container
    hardened = container["securityContext"]
    assert hardened["readOnlyRootFilesystem"] is True
    assert hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"]["drop"] == ["ALL"]
