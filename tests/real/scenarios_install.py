"""Scenarios of the install platform teams run (make release-check): the package manager's own moves."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from tests.real import install
from tests.real.crossplane import FUNCTION
from tests.real.harness import (
    CONVERGE_S,
    GATEWAY,
    OBJECT_API,
    ROUTE,
    VLLM_PORT,
    Env,
    Report,
    model_route_doc,
    true,
)
from tests.real.kube import condition, wait
from tests.real.prober import chat
from tools import release

PKG_API = "pkg.crossplane.io/v1"
# The next release's tag, for the revision this scenario publishes.
NEXT = "v0.1.1"


def _composed(env: Env) -> dict[str, str]:
    """Every composed Object of the run's gateway and route: name -> uid."""
    return {
        f"{ns}/{o['metadata']['name']}": o["metadata"]["uid"]
        for ns in (GATEWAY[0], ROUTE[0])
        for o in env.kube.list(OBJECT_API, "Object", ns)
    }


def _revisions(env: Env) -> list[dict[str, Any]]:
    return [
        rev
        for rev in env.kube.list(PKG_API, "FunctionRevision")
        if rev["metadata"].get("labels", {}).get("pkg.crossplane.io/package") == FUNCTION
    ]


def function_revision_upgraded(env: Env, r: Report) -> None:
    """The Function upgraded by its package, as a platform team upgrades it: the package manager makes a
    new revision and a new runtime Deployment and retires the old one. Nothing composed is deleted or
    recreated, the conditions never lie (the prober), and the new revision serves a new route."""
    installed = env.installed
    assert installed is not None, "run with FGR_INSTALL=package (make release-check)"
    before = _composed(env)
    old = {rev["metadata"]["name"] for rev in _revisions(env)}
    registry = install.Registry(env.sup, port=int(installed.registry.rsplit(":", 1)[1]))
    with tempfile.TemporaryDirectory(prefix="revision-") as d:
        digest = install.publish_revision(registry, NEXT, Path(d))
    this = release.read()
    started = time.time()
    # What `crossplane xpkg update` or a GitOps change does: the Function's package moves on. The
    # Configuration's dependsOn (>=v0.1.0) still holds, so it is the Function that a team upgrades.
    env.kube.merge_patch(
        PKG_API, "Function", FUNCTION, None, {"spec": {"package": f"{this.function}:{NEXT}"}}
    )
    new = wait(
        f"a FunctionRevision of {NEXT} Active and Healthy",
        lambda: next(
            (
                rev
                for rev in _revisions(env)
                if rev["metadata"]["name"] not in old
                and rev["spec"].get("desiredState") == "Active"
                and true(rev, "RevisionHealthy")
                and true(rev, "RuntimeHealthy")
            ),
            None,
        ),
        CONVERGE_S,
    )
    wait(
        "the old revisions Inactive",
        lambda: all(
            rev["spec"].get("desiredState") == "Inactive"
            for rev in _revisions(env)
            if rev["metadata"]["name"] in old
        ),
        CONVERGE_S,
    )
    wait(
        f"the Function's pod runs {NEXT}'s digest alone",
        lambda: install.served_by(env.plane) == digest,
        CONVERGE_S,
    )
    switched = time.time() - started
    # Composed by the new revision: a route created after the switch, which only it can have composed.
    where, model = (ROUTE[0], "after-upgrade"), "after-upgrade-model"
    doc = model_route_doc(
        where,
        model,
        [{"name": "vllm", "endpoint": {"hostname": "vllm.team-a.svc.cluster.local", "port": VLLM_PORT}}],
    )
    env.kube.apply(doc)
    wait(
        "the new route RoutingReady=True",
        lambda: (rt := env.route(*where)) and true(rt, "RoutingReady"),
        CONVERGE_S,
    )
    port = env.plane.gateway_port(GATEWAY[0], GATEWAY[1])
    wait("the new route serves its model", lambda: chat(port, model).ok, CONVERGE_S)
    for xr in (env.gateway(), env.route()):
        assert xr is not None
        for typ in ("Synced", "Ready"):
            assert true(xr, typ), f"{xr['kind']} {typ}: {condition(xr, typ)}"
    after = _composed(env)
    lost = sorted(k for k in before if k not in after)
    recreated = sorted(k for k in before if k in after and after[k] != before[k])
    assert not lost, f"composed Objects deleted by the upgrade: {lost}"
    assert not recreated, f"composed Objects recreated by the upgrade: {recreated}"
    env.kube.delete("ai.example.org/v1alpha1", "ModelRoute", where[1], where[0])
    wait("the new route gone", lambda: env.route(*where) is None, CONVERGE_S)
    note = (
        f"the Function upgraded to a new revision ({new['metadata']['name']}, {digest[:19]}…) in "
        f"{switched:.0f} s with every one of {len(before)} composed Objects kept"
    )
    installed.upgrade = note
    # The package the Function names now: the release line checks its pod serves this one.
    installed.pushed = digest
    r.notes.append(note)


def examples_rendered_through_the_installed_pod(env: Env, r: Report) -> None:
    """Every example rendered by the Crossplane CLI through the Function's pod the package manager runs,
    over the mutual TLS Crossplane uses: identical to the expected renders, as `make image` checks the
    same image run by hand."""
    installed = env.installed
    assert installed is not None, "run with FGR_INSTALL=package (make release-check)"
    identical, problems = install.render_through(env.plane, Path(installed.client_certs))
    from tests.test_examples import EXAMPLE_LIST  # noqa: PLC0415

    installed.rendered = (identical, len(EXAMPLE_LIST))
    assert not problems, "; ".join(problems[:5])
    r.notes.append(
        f"{identical} of {len(EXAMPLE_LIST)} examples rendered through the installed pod identically"
    )
