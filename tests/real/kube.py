"""Speaking the Kubernetes API from the real-component runs: apply, read, wait.

The kubernetes client is imported only here, by the harness that drives a real
cluster; the function's own runtime never imports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config, dynamic, watch
from kubernetes.client.exceptions import ApiException

# Re-exported: what the scenarios read of an object, without the client.
from tests.real.report import condition  # noqa: F401

FIELD_MANAGER = "fgr-integration"


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(str(kubeconfig))
        self.dyn = dynamic.DynamicClient(self.api)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        # (kind, namespace, name) -> when the harness's delete of it returned: the prober excuses a
        # request that failed because a scenario deleted its route after reading it (prober.py).
        self.deleted_at: dict[tuple[str, str | None, str], float] = {}
        # ... and when the latest delete call of it began: the deletion takes effect inside the call.
        self.deleting_since: dict[tuple[str, str | None, str], float] = {}

    def _resource(self, api_version: str, kind: str) -> Any:
        try:
            return self.dyn.resources.get(api_version=api_version, kind=kind)
        except Exception:  # a CRD created since discovery last ran
            self.dyn.resources.invalidate_cache()
            return self.dyn.resources.get(api_version=api_version, kind=kind)

    def apply(self, doc: dict[str, Any]) -> Any:
        """Server-side apply of one object (created if absent)."""
        res = self._resource(doc["apiVersion"], doc["kind"])
        meta = doc["metadata"]
        return res.server_side_apply(
            body=doc,
            name=meta["name"],
            namespace=meta.get("namespace") if res.namespaced else None,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    def create_dry_run(self, doc: dict[str, Any]) -> Any:
        """A create the API server judges (admission included) and does not store."""
        res = self._resource(doc["apiVersion"], doc["kind"])
        namespace = doc["metadata"].get("namespace") if res.namespaced else None
        return res.create(body=doc, namespace=namespace, dry_run="All")

    def apply_file(self, path: Path, mutate: Callable[[dict[str, Any]], None] | None = None) -> None:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                if mutate is not None:
                    mutate(doc)
                self.apply(doc)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, **kwargs: Any
    ) -> dict[str, Any] | None:
        res = self._resource(api_version, kind)
        try:
            obj = res.get(name=name, namespace=namespace if res.namespaced else None, **kwargs)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj.to_dict()  # type: ignore[no-any-return]

    def raw(self, path: str) -> str:
        """A GET of a non-resource path (/metrics), as the admin the kubeconfig names."""
        method, url, headers, _, _ = self.api.param_serialize("GET", path, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, _request_timeout=10)
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.reason}")
        return response.read().decode()  # type: ignore[no-any-return]

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        res = self._resource(api_version, kind)
        return [i.to_dict() for i in res.get(namespace=namespace, **kwargs).items]

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        stop: threading.Event,
        on_event: Callable[[str, dict[str, Any], float], None],
    ) -> None:
        """Every change of one kind, as on_event(type, object, when it arrived), until stop is set.

        First an ADDED per object as a list found it, then each change as the API server sends it,
        from the list's version. A watch the server ends (its timeout) or cannot answer for a moment
        (429, 5xx, a broken connection) goes on from the last version seen, so nothing is missed. One
        it can no longer serve from there (410 Gone) lists afresh, with the objects as they stand
        again: what changed in between is lost, and on_event hears ("GAP", {}, when) first.

        The list, not a watch from no version, starts it: such a watch's first events are the
        objects in key order, each at its own version, and the last of them is no version to go
        on from. Going on from it, a watch sends again every change made after that one object's
        last, older words of the objects listed after it among them: a route's False and True
        from before a rollout, heard again during it (the make scale of add52c0 counted them as
        routes said True again; etcd's own history of them shows no such write).
        """
        res = self._resource(api_version, kind)
        version: str | None = None
        while not stop.is_set():
            watcher = watch.Watch()
            try:
                if version is None:
                    version = self._list_from(res, api_version, kind, namespace, on_event)
                # With a timeout, the client raises every ERROR event as an ApiException.
                for event in self.dyn.watch(
                    res, namespace=namespace, resource_version=version, timeout=5, watcher=watcher
                ):
                    obj = event["raw_object"]
                    version = obj["metadata"]["resourceVersion"]
                    on_event(event["type"], obj, time.time())
                    if stop.is_set():
                        break
            except ApiException as e:
                code = e.status or 0
                if code == 410:
                    version = None
                    on_event("GAP", {}, time.time())
                elif code in {0, 429} or code >= 500:
                    stop.wait(0.5)
                else:
                    raise
            except (urllib3.exceptions.HTTPError, OSError):
                stop.wait(0.5)
            finally:
                watcher.stop()

    @staticmethod
    def _list_from(
        res: Any,
        api_version: str,
        kind: str,
        namespace: str | None,
        on_event: Callable[[str, dict[str, Any], float], None],
    ) -> str:
        """ADDED for each object a list finds; the list's version, which a watch goes on from."""
        found = res.get(namespace=namespace).to_dict()
        at = time.time()
        for item in found.get("items") or []:
            on_event("ADDED", {"apiVersion": api_version, "kind": kind, **item}, at)
        return str(found["metadata"]["resourceVersion"])

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        res = self._resource(api_version, kind)
        self.deleting_since[kind, namespace, name] = time.time()
        try:
            res.delete(name=name, namespace=namespace if res.namespaced else None)
        except ApiException as e:
            if e.status != 404:
                raise
        finally:
            # Returned, whatever it answered: a delete that failed must not stand as one under way.
            self.deleted_at[kind, namespace, name] = time.time()

    def merge_patch(
        self, api_version: str, kind: str, name: str, namespace: str | None, patch: dict[str, Any]
    ) -> None:
        res = self._resource(api_version, kind)
        res.patch(
            body=patch,
            name=name,
            namespace=namespace if res.namespaced else None,
            content_type="application/merge-patch+json",
        )

    def patch_status(
        self,
        api_version: str,
        kind: str,
        name: str,
        status: dict[str, Any] | None,
        namespace: str | None = None,
    ) -> None:
        """A merge patch of the status subresource; None removes the status."""
        res = self._resource(api_version, kind)
        res.status.patch(
            body={"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
        )

    def wait_crds_established(self, timeout: float = 60) -> None:
        wait(
            "every CRD Established",
            lambda: all(
                _established(c) for c in self.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            ),
            timeout,
        )
        self.dyn.resources.invalidate_cache()


def _established(crd: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Established" and c["status"] == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


def wait(what: str, check: Callable[[], Any], timeout: float = 120, interval: float = 0.25) -> Any:
    """check()'s first truthy value; TimeoutError naming what was awaited."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        # An API server starting again after a fault refuses connections for a while.
        except (ApiException, urllib3.exceptions.HTTPError) as e:
            last = e
        time.sleep(interval)
    raise TimeoutError(
        f"{what}: not within {timeout:.0f} s"
        + (f" (last error: {getattr(last, 'reason', None) or last})" if last else "")
    )
