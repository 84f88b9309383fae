"""End to end on a kind cluster that e2e/run.sh prepared.

Skips, saying why, where kind or a Docker engine is absent (as on the
machines this project is developed and tested on), or where the cluster is
not reachable. Run it through `e2e/run.sh` (or `make e2e`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "gateway-readiness-e2e"
GROUP, VERSION = "ai.example.org", "v1alpha1"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _why_not() -> str | None:
    if shutil.which("kind") is None:
        return "kind is not installed"
    if shutil.which("docker") is None:
        return "docker is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no Docker engine is running"
    clusters = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, check=False).stdout
    if CLUSTER not in clusters.split():
        return f"kind cluster {CLUSTER} does not exist: run e2e/run.sh"
    return None


REASON = _why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"e2e not run: {REASON}")


@pytest.fixture(scope="module")
def api() -> Any:
    from kubernetes import client, config  # noqa: PLC0415 - only where a cluster exists

    config.load_kube_config(context=f"kind-{CLUSTER}")
    return client


def wait_for(what: str, check: Callable[[], Any], timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = check()
            if last:
                return last
        time.sleep(3)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def xr(api: Any, plural: str, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = api.CustomObjectsApi().get_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name
    )
    return obj


def condition(obj: dict[str, Any], typ: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == typ:
            return dict(c)
    return {}


def apply(path: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> None:
    doc = yaml.safe_load(path.read_text())
    if mutate:
        mutate(doc)
    subprocess.run(["kubectl", "apply", "-f", "-"], input=yaml.safe_dump(doc), text=True, check=True)


def _route_to_fake_backend(doc: dict[str, Any]) -> None:
    doc["spec"]["backends"] = [
        {"name": "fake", "endpoint": {"hostname": "fake-openai.team-a.svc.cluster.local", "port": 8000}}
    ]


@contextlib.contextmanager
def port_forward(namespace: str, target: str, port: int) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        local = s.getsockname()[1]
    proc = subprocess.Popen(
        ["kubectl", "-n", namespace, "port-forward", target, f"{local}:{port}"], stdout=subprocess.DEVNULL
    )
    try:
        wait_for(
            "port-forward",
            lambda: socket.create_connection(("127.0.0.1", local), timeout=1).close() or True,
            30,
        )
        yield f"http://127.0.0.1:{local}"
    finally:
        proc.terminate()


def envoy_deployment(api: Any) -> tuple[str, str]:
    gw = xr(api, "inferencegateways", "platform", "inference")
    return gw["status"]["deployment"]["namespace"], gw["status"]["deployment"]["name"]


def replica_sets(api: Any, namespace: str, name: str) -> set[str]:
    owned = api.AppsV1Api().list_namespaced_replica_set(namespace).items
    return {
        rs.metadata.name
        for rs in owned
        if any(o.name == name for o in rs.metadata.owner_references or []) and (rs.spec.replicas or 0) > 0
    }


def apply_route_and_wait(api: Any) -> None:
    """The example ModelRoute, served by the fake backend, until RoutingReady=True."""
    apply(ROOT / "examples" / "model-route" / "xr.yaml", _route_to_fake_backend)
    wait_for(
        "RoutingReady=True",
        lambda: condition(xr(api, "modelroutes", "team-a", "llama"), "RoutingReady").get("status") == "True",
    )


def _cluster_ip(doc: dict[str, Any]) -> None:
    """kind has no load-balancer controller: a LoadBalancer Service never gets an
    address there, and a Gateway without one is never Programmed."""
    doc["spec"].setdefault("envoy", {})["serviceType"] = "ClusterIP"


def test_gateway_becomes_ready(api: Any) -> None:
    apply(ROOT / "examples" / "inference-gateway" / "xr.yaml", _cluster_ip)
    wait_for(
        "GatewayReady=True",
        lambda: (
            condition(xr(api, "inferencegateways", "platform", "inference"), "GatewayReady").get("status")
            == "True"
        ),
    )


def test_a_model_route_becomes_ready_and_answers(api: Any) -> None:
    apply_route_and_wait(api)
    namespace, _ = envoy_deployment(api)
    service = wait_for(
        "the Envoy service",
        lambda: next(
            s.metadata.name
            for s in api.CoreV1Api().list_namespaced_service(namespace).items
            if (s.metadata.labels or {}).get("gateway.envoyproxy.io/owning-gateway-name") == "inference"
        ),
    )
    with port_forward(namespace, f"svc/{service}", 80) as url:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "ping"}]}).encode()
        request = urllib.request.Request(  # noqa: S310 - loopback port-forward
            f"{url}/v1/chat/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as rsp:  # noqa: S310 - loopback port-forward
            assert rsp.status == 200
        with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as rsp:  # noqa: S310
            models = [m["id"] for m in json.load(rsp)["data"]]
    assert MODEL in models
    assert all(not m.startswith("never-sent-") for m in models), "the anchor is never a model"


def test_removing_the_last_route_does_not_roll_envoy(api: Any) -> None:
    namespace, name = envoy_deployment(api)
    before = replica_sets(api, namespace, name)
    subprocess.run(
        ["kubectl", "-n", "team-a", "delete", "modelroutes.ai.example.org", "llama", "--wait"], check=True
    )
    time.sleep(60)  # Envoy AI Gateway would roll within seconds without the anchor
    assert replica_sets(api, namespace, name) == before
    gw = xr(api, "inferencegateways", "platform", "inference")
    assert condition(gw, "GatewayReady").get("status") == "True"


def test_evicting_one_of_two_envoy_pods_keeps_the_gateway_ready(api: Any) -> None:
    apply_route_and_wait(api)
    namespace, _ = envoy_deployment(api)
    # Pods of an earlier rollout may still be terminating: only live pods count.
    pods = [
        p
        for p in api.CoreV1Api()
        .list_namespaced_pod(namespace, label_selector="gateway.envoyproxy.io/owning-gateway-name=inference")
        .items
        if p.metadata.deletion_timestamp is None
    ]
    assert len(pods) == 2
    eviction = api.V1Eviction(metadata=api.V1ObjectMeta(name=pods[0].metadata.name, namespace=namespace))
    api.CoreV1Api().create_namespaced_pod_eviction(pods[0].metadata.name, namespace, eviction)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        gw = xr(api, "inferencegateways", "platform", "inference")
        assert condition(gw, "GatewayReady").get("status") == "True", condition(gw, "GatewayReady")
        route = xr(api, "modelroutes", "team-a", "llama")
        assert len(route["spec"]["crossplane"]["resourceRefs"]) == 3, "every route resource still composed"
        time.sleep(2)
