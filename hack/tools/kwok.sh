# KWOK's controller (sigs.k8s.io/kwok, cmd/kwok): it runs out of cluster against a
# member's API server, keeps the Nodes we create Ready without a kubelet, and moves the
# pods the real kube-scheduler binds through the Stages we apply (Running and Ready after
# a short delay, or a kubelet-shaped failure for a "broken model"; hack/fleetbox/gpu.py).
#
# v0.8.0: the newest release the Go module proxy serves (it lists v0.6.1, v0.7.0 and
# v0.8.0 for sigs.k8s.io/kwok).
# Its go.mod says go 1.26.0 and it builds with the local Go 1.26. It depends on
# k8s.io/* v0.36.1, not the v0.35.8 of our kube binaries, so it shares only the
# non-Kubernetes packages of the Go build cache with them; only cmd/kwok is built
# (not kwokctl), in a wrapper module like the others.
KWOK_VERSION=v0.8.0
KWOK_MODULE=sigs.k8s.io/kwok

install_kwok() {
  local dest="$MODELPLANE_TOOLS/kwok-$KWOK_VERSION"
  if [[ ! -x $dest/bin/kwok ]]; then
    log "building kwok $KWOK_VERSION (a few minutes the first time)"
    local src
    src=$(go_module_dir "$KWOK_MODULE" "$KWOK_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/kwok\n\n'
      grep -E '^go ' "$src/go.mod"
      printf '\nrequire %s %s\n' "$KWOK_MODULE" "$KWOK_VERSION"
    } >"$dest/wrapper/go.mod"
    local started=$SECONDS
    _build_in_wrapper "$dest/wrapper" "$dest/bin" "" "$KWOK_MODULE/cmd/kwok"
    log "built kwok in $((SECONDS - started)) s"
  fi
  link kwok "$dest/bin/kwok"
}

version_kwok() {
  printf 'kwok %s\n' "$("$TOOLS_BIN/kwok" --version 2>&1 | head -1)"
}
