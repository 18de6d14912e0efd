# provider-kubernetes' controller (cmd/provider), which the fleet box runs out of
# cluster against the control plane so composed Objects reach the member API servers.
#
# v1.3.1: the release whose CRDs hack/tools/schemas.sh pins (v1.4.x needs Go >= 1.27.1).
# It pins github.com/nebius/gosdk v0.2.28, which the module proxy here refuses (403), so
# it is built in a wrapper module that replaces that one dependency with v0.2.29, the
# nearest version served (only the Nebius identity type uses it).
PROVIDER_KUBERNETES_VERSION=v1.3.1
PROVIDER_KUBERNETES_MODULE=github.com/crossplane-contrib/provider-kubernetes
# provider-helm: its CRDs only, so the Releases compose-serving-stack composes can be
# created on the fleet box's control plane. No controller runs: the charts live in
# registries this machine cannot reach. v1.2.0: the proxy refuses v0.21.0-v1.1.0 (403).
PROVIDER_KUBERNETES_REPLACES=("github.com/nebius/gosdk => github.com/nebius/gosdk v0.2.29")
PROVIDER_HELM_VERSION=v1.2.0
PROVIDER_HELM_MODULE=github.com/crossplane-contrib/provider-helm

install_provider_kubernetes() {
  local dest="$MODELPLANE_TOOLS/provider-kubernetes-$PROVIDER_KUBERNETES_VERSION"
  if [[ ! -x $dest/bin/provider-kubernetes || ! -d $dest/crds ]]; then
    log "building provider-kubernetes $PROVIDER_KUBERNETES_VERSION (5-10 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$PROVIDER_KUBERNETES_MODULE" "$PROVIDER_KUBERNETES_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/provider-kubernetes\n\n'
      grep -E '^go ' "$src/go.mod"
      printf '\nrequire %s %s\n\nreplace (\n' "$PROVIDER_KUBERNETES_MODULE" "$PROVIDER_KUBERNETES_VERSION"
      printf '\t%s\n' "${PROVIDER_KUBERNETES_REPLACES[@]}"
      printf ')\n'
    } >"$dest/wrapper/go.mod"
    _build_in_wrapper "$dest/wrapper" "$dest/bin" "" "$PROVIDER_KUBERNETES_MODULE/cmd/provider" ||
      die "cannot build provider-kubernetes (see above)"
    mv "$dest/bin/provider" "$dest/bin/provider-kubernetes"
    log "built provider-kubernetes in $((SECONDS - started)) s"
    rm -rf "$dest/crds"
    mkdir -p "$dest/crds"
    cp "$src"/package/crds/*.yaml "$dest/crds/"
    chmod -R u+w "$dest/crds"
  fi
  link provider-kubernetes "$dest/bin/provider-kubernetes"
  ln -sfn "$dest/crds" "$MODELPLANE_TOOLS/provider-kubernetes-crds"

  local helm="$MODELPLANE_TOOLS/provider-helm-$PROVIDER_HELM_VERSION"
  if [[ ! -d $helm/crds ]]; then
    local helm_src
    helm_src=$(go_module_dir "$PROVIDER_HELM_MODULE" "$PROVIDER_HELM_VERSION")
    rm -rf "$helm/crds.partial"
    mkdir -p "$helm/crds.partial"
    cp "$helm_src"/package/crds/*.yaml "$helm/crds.partial/"
    chmod -R u+w "$helm/crds.partial"
    mv "$helm/crds.partial" "$helm/crds"
  fi
  ln -sfn "$helm/crds" "$MODELPLANE_TOOLS/provider-helm-crds"
  _provider_package provider-kubernetes "$PROVIDER_KUBERNETES_MODULE" "$PROVIDER_KUBERNETES_VERSION"
  _provider_package provider-helm "$PROVIDER_HELM_MODULE" "$PROVIDER_HELM_VERSION"
}

# _provider_package NAME MODULE VERSION: the provider's package root as its module ships
# it (package/crossplane.yaml and package/crds), linked as $MODELPLANE_TOOLS/NAME-package.
# The package-install test builds it with `crossplane xpkg build` and pushes it to a
# loopback registry, so core's package manager installs the provider as a dependency.
_provider_package() {
  local dest="$MODELPLANE_TOOLS/$1-$3/package"
  if [[ ! -f $dest/crossplane.yaml ]]; then
    local src
    src=$(go_module_dir "$2" "$3")
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial/crds"
    cp "$src/package/crossplane.yaml" "$dest.partial/"
    cp "$src"/package/crds/*.yaml "$dest.partial/crds/"
    chmod -R u+w "$dest.partial"
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
  fi
  ln -sfn "$dest" "$MODELPLANE_TOOLS/$1-package"
}

version_provider_kubernetes() {
  printf 'provider-kubernetes %s (provider-helm CRDs %s)\n' "$PROVIDER_KUBERNETES_VERSION" "$PROVIDER_HELM_VERSION"
}
