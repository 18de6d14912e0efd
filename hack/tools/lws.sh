# The LeaderWorkerSet controller (sigs.k8s.io/lws, cmd/), run out of cluster beside a
# fleet-box member so a LeaderWorkerSet becomes real leader and worker pods with the
# controller's own labels, env and ordering (hack/fleetbox/lws.py starts it).
#
# v0.8.0: the newest release the Go module proxy serves (it lists v0.7.0 and v0.8.0).
# Its go.mod says go 1.25.0 and has no replace or exclude directives; it depends on
# k8s.io/* v0.34.3 and controller-runtime v0.22.4. The module-cache folder is read-only,
# so the controller is built in a wrapper module that requires the release (minimal
# version selection then picks exactly the release's own requirements).
#
# Beside the binary, the tool folder keeps what a cluster install applies from the
# release's config/ (kustomize input, copied verbatim; hack/fleetbox/lws.py applies the
# webhook patches the kustomization names and rewrites clientConfig to a loopback URL):
#   config/crd/       the LeaderWorkerSet CRD (bases/)
#   config/webhook/   manifests.yaml (Mutating/ValidatingWebhookConfiguration) and the
#                     mutating/validating patches that add the pod webhooks' objectSelector
LWS_VERSION=v0.8.0
LWS_MODULE=sigs.k8s.io/lws

install_lws() {
  local dest="$MODELPLANE_TOOLS/lws-$LWS_VERSION"
  if [[ ! -x $dest/bin/lws-controller || ! -f $dest/config/webhook/manifests.yaml ]]; then
    log "building the LeaderWorkerSet controller $LWS_VERSION (a few minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$LWS_MODULE" "$LWS_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/lws\n\n'
      grep -E '^(go|godebug) ' "$src/go.mod"
      printf '\nrequire %s %s\n' "$LWS_MODULE" "$LWS_VERSION"
    } >"$dest/wrapper/go.mod"
    # The release's Makefile stamps these three; the commit and date are the tag's, as
    # the module proxy records them.
    local info commit date
    info="$(go env GOMODCACHE)/cache/download/$LWS_MODULE/@v/$LWS_VERSION.info"
    commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("Origin", {}).get("Hash", "unknown"))' "$info")
    date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Time"])' "$info")
    local pkg=$LWS_MODULE/pkg/version
    _build_in_wrapper "$dest/wrapper" "$dest/bin" \
      "-X $pkg.GitVersion=$LWS_VERSION -X $pkg.GitCommit=$commit -X $pkg.BuildDate=$date" \
      "$LWS_MODULE/cmd"
    mv "$dest/bin/cmd" "$dest/bin/lws-controller"
    log "built lws-controller in $((SECONDS - started)) s"
    rm -rf "$dest/config"
    mkdir -p "$dest/config/crd" "$dest/config/webhook"
    cp "$src"/config/crd/bases/*.yaml "$dest/config/crd/"
    cp "$src/config/webhook/manifests.yaml" "$src/config/webhook/mutating-patch.yaml" \
      "$src/config/webhook/validating-patch.yaml" "$dest/config/webhook/"
    chmod -R u+w "$dest/config"
  fi
  link lws-controller "$dest/bin/lws-controller"
  ln -sfn "$dest/config" "$MODELPLANE_TOOLS/lws-config"
}

version_lws() {
  printf 'lws-controller %s\n' "$("$TOOLS_BIN/lws-controller" --version 2>&1 | head -1)"
}
