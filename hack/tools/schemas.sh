# The published schemas every composed manifest is validated against, fetched from the
# projects' own Go modules with `go mod download` (the module proxy only) and laid out
# in the tool cache; nothing of theirs is committed.
#
#   $MODELPLANE_TOOLS/schemas-<set>/crds/     CustomResourceDefinitions, one file each
#   $MODELPLANE_TOOLS/schemas-<set>/openapi/  Kubernetes' OpenAPI v3 documents
#   $MODELPLANE_TOOLS/schemas-<set>/VERSIONS  the module@version each came from
#   $TOOLS_BIN/schemas -> that folder (what the tests ask for)
#
# <set> is a hash of the pins below, so changing any pin lays out a fresh folder.
#
# Pins, and why these:
# - provider-kubernetes v1.3.1: v1.4.x's go.mod needs Go >= 1.27.1, which `go mod
#   download` refuses under GOTOOLCHAIN=local with Go 1.26; v1.3.1 has the namespaced
#   kubernetes.m.crossplane.io Object with the same fields we write.
# - Grove: github.com/ai-dynamo/grove/operator is refused (403) at every version tried;
#   its API module github.com/ai-dynamo/grove/operator/api v0.1.0-alpha.6 is served and
#   carries the CRDs (core/v1alpha1/crds).
# - Multi-Cluster Services API (mcs-api) v0.5.2: serves ServiceExport/ServiceImport at
#   v1alpha1 (what the suite composes, the version MCS implementations widely serve) and
#   v1beta1; managed traffic exports each cluster's backend through it.
# - Kubernetes: the version hack/tools/kube.sh builds kube-apiserver at (KUBE_VERSION),
#   so manifests are checked against the API the runtime tests run.
SCHEMAS_KEDA=github.com/kedacore/keda/v2@v2.21.0
SCHEMAS_LWS=sigs.k8s.io/lws@v0.8.0
SCHEMAS_GROVE=github.com/ai-dynamo/grove/operator/api@v0.1.0-alpha.6
SCHEMAS_GATEWAY_API=sigs.k8s.io/gateway-api@v1.4.0
SCHEMAS_INFERENCE_EXTENSION=sigs.k8s.io/gateway-api-inference-extension@v1.3.0
SCHEMAS_ENVOY_GATEWAY=github.com/envoyproxy/gateway@v1.7.0
SCHEMAS_PROVIDER_KUBERNETES=github.com/crossplane-contrib/provider-kubernetes@v1.3.1
SCHEMAS_MCS_API=sigs.k8s.io/mcs-api@v0.5.2
SCHEMAS_KUBE_DEFAULT=v1.35.8

_schemas_kube() { printf 'k8s.io/kubernetes@%s' "${KUBE_VERSION:-$SCHEMAS_KUBE_DEFAULT}"; }

# module@version and the folders (or files) inside it that hold the CRDs.
_schemas_sources() {
  printf '%s %s\n' \
    "$SCHEMAS_KEDA" config/crd/bases \
    "$SCHEMAS_LWS" config/crd/bases \
    "$SCHEMAS_GROVE" core/v1alpha1/crds \
    "$SCHEMAS_GATEWAY_API" config/crd/standard \
    "$SCHEMAS_INFERENCE_EXTENSION" config/crd/bases \
    "$SCHEMAS_ENVOY_GATEWAY" charts/gateway-helm/crds/generated/gateway.envoyproxy.io_httproutefilters.yaml \
    "$SCHEMAS_ENVOY_GATEWAY" charts/gateway-helm/crds/generated/gateway.envoyproxy.io_backends.yaml \
    "$SCHEMAS_ENVOY_GATEWAY" charts/gateway-helm/crds/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml \
    "$SCHEMAS_PROVIDER_KUBERNETES" package/crds \
    "$SCHEMAS_MCS_API" config/crd
}

_schemas_set() {
  { _schemas_sources; _schemas_kube; } | sha256sum | cut -c1-12
}

install_schemas() {
  local dest
  dest="$MODELPLANE_TOOLS/schemas-$(_schemas_set)"
  if [[ ! -f $dest/VERSIONS ]]; then
    log "fetching CRDs and the Kubernetes OpenAPI documents into $dest"
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial/crds" "$dest.partial/openapi"
    local module path dir file
    while read -r module path; do
      dir=$(go_module_dir "${module%@*}" "${module#*@}")
      [[ -e $dir/$path ]] || die "$module has no $path"
      # Only CustomResourceDefinitions: some folders also hold admission policies.
      while IFS= read -r file; do
        if grep -q '^kind: CustomResourceDefinition' "$file"; then
          cp "$file" "$dest.partial/crds/"
        fi
      done < <(find "$dir/$path" -name '*.yaml' | sort)
      printf '%s %s\n' "$module" "$path" >>"$dest.partial/VERSIONS.partial"
    done < <(_schemas_sources)
    module=$(_schemas_kube)
    dir=$(go_module_dir "${module%@*}" "${module#*@}")
    cp "$dir"/api/openapi-spec/v3/*.json "$dest.partial/openapi/"
    printf '%s api/openapi-spec/v3\n' "$module" >>"$dest.partial/VERSIONS.partial"
    chmod -R u+w "$dest.partial"
    mv "$dest.partial/VERSIONS.partial" "$dest.partial/VERSIONS"
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
  fi
  link schemas "$dest"
}

version_schemas() {
  printf 'schemas %s\n' "$(readlink "$TOOLS_BIN/schemas")"
  sed 's/^/  /' "$TOOLS_BIN/schemas/VERSIONS"
}
