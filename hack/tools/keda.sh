# KEDA's operator and its metrics adapter, run out of cluster beside each fleet-box
# member so floors reach workloads through real KEDA and the real HPA controller. Both
# binaries are built in ONE `go build` of one wrapper module so the shared packages
# (every scaler KEDA links in, client-go, controller-runtime) compile once; the CRDs
# are copied from the same module.
#
# github.com/kedacore/keda/v2 cannot be built in its module-cache folder as is: the
# folder is read-only and its go.mod carries a replace directive (nexus-proto-annotations)
# and an exclude (go-chi) that a requiring module must restate, so the wrapper module
# copies both from the release's own go.mod. Its go.mod says go 1.26.0.
KEDA_VERSION=v2.21.0
KEDA_MODULE=github.com/kedacore/keda/v2

install_keda() {
  local dest="$MODELPLANE_TOOLS/keda-$KEDA_VERSION"
  if [[ ! -x $dest/bin/keda-operator || ! -x $dest/bin/keda-adapter || ! -d $dest/crds ]]; then
    log "building keda operator and adapter $KEDA_VERSION (long the first time: every scaler is linked in)"
    local src started=$SECONDS
    src=$(go_module_dir "$KEDA_MODULE" "$KEDA_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/keda\n\n'
      grep -E '^(go|godebug) ' "$src/go.mod"
      printf '\nrequire %s %s\n\n' "$KEDA_MODULE" "$KEDA_VERSION"
      # Single-line replace and exclude directives, as the release states them.
      grep -E '^(replace|exclude) ' "$src/go.mod"
    } >"$dest/wrapper/go.mod"
    local ldflags="-X $KEDA_MODULE/version.Version=${KEDA_VERSION#v} -X $KEDA_MODULE/version.GitCommit=$KEDA_VERSION"
    _build_in_wrapper "$dest/wrapper" "$dest/bin" "$ldflags" \
      "$KEDA_MODULE/cmd/operator" "$KEDA_MODULE/cmd/adapter"
    mv "$dest/bin/operator" "$dest/bin/keda-operator"
    mv "$dest/bin/adapter" "$dest/bin/keda-adapter"
    log "built keda operator and adapter in $((SECONDS - started)) s"
    rm -rf "$dest/crds"
    mkdir -p "$dest/crds"
    cp "$src"/config/crd/bases/*.yaml "$dest/crds/"
    chmod -R u+w "$dest/crds"
  fi
  link keda-operator "$dest/bin/keda-operator"
  link keda-adapter "$dest/bin/keda-adapter"
  ln -sfn "$dest/crds" "$MODELPLANE_TOOLS/keda-crds"
}

version_keda() {
  # Neither binary has a version flag; the module version is in their build info.
  local b
  for b in keda-operator keda-adapter; do
    printf '%s %s\n' "$b" "$(go version -m "$TOOLS_BIN/$b" 2>/dev/null | awk -v m="$KEDA_MODULE" '$2 == m {print $3; exit}')"
  done
}
