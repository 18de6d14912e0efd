# Helm (helm.sh/helm/v3, cmd/helm): `helm template` renders the substrate's charts with
# exactly the values compose-serving-stack composes (tests/package/test_charts.py).
#
# v3.18.5: the Helm library provider-helm v1.2.0 (the provider the Configuration depends
# on) is built with, so a chart renders here as it renders when the provider installs
# it. Built inside the module's own folder (its go.mod and go.sum, no replace
# directives), like the crossplane CLI; the version string is Helm's internal/version.
HELM_VERSION=v3.18.5
HELM_MODULE=helm.sh/helm/v3

install_helm() {
  local dest="$MODELPLANE_TOOLS/helm-$HELM_VERSION"
  if [[ ! -x $dest/bin/helm ]]; then
    log "building helm $HELM_VERSION (2-5 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$HELM_MODULE" "$HELM_VERSION")
    rm -rf "$dest/bin.partial"
    mkdir -p "$dest/bin.partial"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION" \
      -o "$dest/bin.partial/" ./cmd/helm) || die "cannot build helm (see above)"
    mkdir -p "$dest/bin"
    mv "$dest/bin.partial/helm" "$dest/bin/helm"
    rm -rf "$dest/bin.partial"
    log "built helm in $((SECONDS - started)) s"
  fi
  link helm "$dest/bin/helm"
}

version_helm() {
  printf 'helm %s\n' "$("$TOOLS_BIN/helm" version --short)"
}
