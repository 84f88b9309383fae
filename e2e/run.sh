#!/usr/bin/env bash
# Create a kind cluster with everything function-gateway-readiness runs
# against, then run the e2e pytest suite on it.
#
# Needs: docker (a running engine), kind, kubectl, helm, the crossplane CLI,
# and network access to the public registries. Versions are pinned below.
#   e2e/run.sh          # create the cluster (if absent), install, test
#   KEEP=1 e2e/run.sh   # keep the cluster afterwards
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

CLUSTER="${CLUSTER:-gateway-readiness-e2e}"
# The versions: versions.env, the one pin; the environment may override each.
for pin in CROSSPLANE_VERSION PROVIDER_KUBERNETES_VERSION ENVOY_GATEWAY_VERSION ENVOY_AI_GATEWAY_VERSION; do
  if [ -z "${!pin:-}" ]; then
    value="$(sed -n "s/^${pin}=//p" "$root/versions.env")"
    [ -n "$value" ] || { echo "e2e: versions.env has no ${pin}" >&2; exit 2; }
    printf -v "$pin" '%s' "$value"
  fi
done
REGISTRY_NAME="kind-registry"
REGISTRY_PORT="5001"
# How the cluster reaches the registry: a name ending in .local, which
# Crossplane's package manager (go-containerregistry) pulls over plain HTTP as
# it does localhost; containerd on the nodes is told the same below. A bare
# name such as kind-registry would be pulled over HTTPS and fail.
REGISTRY_IN_CLUSTER="kind-registry.local:5000"
# The published reference the manifests carry (release.env), replaced by the
# local registry's for this run.
# shellcheck source=/dev/null
. "$root/release.env"
PUBLISHED_REF="${REGISTRY}/function-gateway-readiness:${VERSION}"
PUSH_REF="localhost:${REGISTRY_PORT}/function-gateway-readiness:${VERSION}"
FUNCTION_REF="${REGISTRY_IN_CLUSTER}/function-gateway-readiness:${VERSION}"

need() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "e2e: $tool is required" >&2; exit 2; }
  done
}
need docker kind kubectl helm crossplane python
docker info >/dev/null 2>&1 || { echo "e2e: no Docker engine is running" >&2; exit 2; }
python -c "import pytest, yaml, kubernetes" 2>/dev/null || {
  echo "e2e: python needs pytest, pyyaml and kubernetes: pip install -e '.[test,e2e]' (make e2e does)" >&2
  exit 2
}

cleanup() {
  if [ -z "${KEEP:-}" ]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# A local registry kind can pull from, for the function's package.
if [ -z "$(docker ps -q -f "name=^${REGISTRY_NAME}$")" ]; then
  docker run -d --restart=always -p "127.0.0.1:${REGISTRY_PORT}:5000" --name "$REGISTRY_NAME" registry:2
fi

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config "$here/manifests/kind.yaml"
fi
docker network connect --alias "${REGISTRY_IN_CLUSTER%:*}" kind "$REGISTRY_NAME" 2>/dev/null || true
# containerd on every node pulls the same name over plain HTTP (config_path is
# set in manifests/kind.yaml).
for node in $(kind get nodes --name "$CLUSTER"); do
  dir="/etc/containerd/certs.d/${REGISTRY_IN_CLUSTER}"
  docker exec "$node" mkdir -p "$dir"
  printf '[host."http://%s"]\n' "$REGISTRY_IN_CLUSTER" | docker exec -i "$node" tee "$dir/hosts.toml" >/dev/null
done
kubectl apply -f "$here/manifests/local-registry.yaml"

echo "--- building the function image and package"
docker build -t function-gateway-readiness:e2e "$root"
empty_examples="$(mktemp -d)"
crossplane xpkg build --package-root "$root/package" --embed-runtime-image function-gateway-readiness:e2e \
  --examples-root "$empty_examples" -o "$here/function.xpkg"
crossplane xpkg push -f "$here/function.xpkg" "$PUSH_REF"

echo "--- Crossplane ${CROSSPLANE_VERSION}"
helm repo add crossplane-stable https://charts.crossplane.io/stable --force-update >/dev/null
helm upgrade --install crossplane crossplane-stable/crossplane --version "${CROSSPLANE_VERSION#v}" \
  --namespace crossplane-system --create-namespace --wait

echo "--- Envoy Gateway ${ENVOY_GATEWAY_VERSION}, then Envoy AI Gateway ${ENVOY_AI_GATEWAY_VERSION}"
# Envoy Gateway first: its chart brings the Gateway API CRDs that Envoy AI
# Gateway's controller needs at start.
helm upgrade --install eg oci://docker.io/envoyproxy/gateway-helm --version "$ENVOY_GATEWAY_VERSION" \
  --namespace envoy-gateway-system --create-namespace \
  -f "$here/manifests/envoy-gateway-values.yaml" --wait
helm upgrade --install aieg-crd oci://docker.io/envoyproxy/ai-gateway-crds-helm --version "$ENVOY_AI_GATEWAY_VERSION" \
  --namespace envoy-ai-gateway-system --create-namespace --wait
helm upgrade --install aieg oci://docker.io/envoyproxy/ai-gateway-helm --version "$ENVOY_AI_GATEWAY_VERSION" \
  --namespace envoy-ai-gateway-system --create-namespace --wait
kubectl apply -f "$here/manifests/gatewayclass.yaml"

echo "--- provider-kubernetes ${PROVIDER_KUBERNETES_VERSION} with watches, and the function"
sed -e "s#provider-kubernetes:v[0-9.]*#provider-kubernetes:${PROVIDER_KUBERNETES_VERSION}#" \
    "$root/examples/install/provider-kubernetes.yaml" | kubectl apply -f -
# Two replicas and a PodDisruptionBudget, as the install manifest runs it.
sed -e "s#${PUBLISHED_REF}#${FUNCTION_REF}#" "$root/examples/install/function.yaml" | kubectl apply -f -
kubectl apply -f "$root/examples/install/rbac.yaml"
kubectl wait --for=condition=Healthy providers.pkg.crossplane.io --all --timeout=600s
kubectl wait --for=condition=Healthy functions.pkg.crossplane.io --all --timeout=600s
kubectl apply -f "$root/examples/install/providerconfig.yaml"

echo "--- the APIs, and a fake OpenAI-compatible backend"
kubectl apply -f "$root/examples/configuration/inferencegateway-xrd.yaml" -f "$root/examples/configuration/modelroute-xrd.yaml"
kubectl wait --for=condition=Established compositeresourcedefinitions --all --timeout=300s
kubectl apply -f "$root/examples/configuration/inferencegateway-composition.yaml" \
              -f "$root/examples/configuration/modelroute-composition.yaml"
kubectl apply -f "$here/manifests/fake-backend.yaml"
kubectl -n team-a rollout status deployment/fake-openai --timeout=300s

echo "--- the suite"
python -m pytest -v "$here" -p no:cacheprovider
