# The node tier's collector (hostmetrics, kubeletstats and filelog receivers,
# k8s_attributes, filter, resource, batch, memory_limiter, the OTLP exporter), built with
# the collector builder of its own release from hack/tools/otelcol-node/manifest.yaml.
# Its release is older than the cluster collector's (OTELCOL_VERSION): the manifest says
# why v0.149.0 is the newest the module proxy serves whole for these receivers. About 15
# minutes on two cores the first time.
OTELCOL_NODE_VERSION=v0.149.0
OTELCOL_NODE_MANIFEST="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/otelcol-node/manifest.yaml"

install_otelcol_node() {
  local dest="$MODELPLANE_TOOLS/otelcol-node-$OTELCOL_NODE_VERSION"
  if [[ ! -x $dest/bin/otelcol-node ]] || ! cmp -s "$OTELCOL_NODE_MANIFEST" "$dest/manifest.yaml"; then
    log "building otelcol-node $OTELCOL_NODE_VERSION (about 15 minutes the first time)"
    command -v go >/dev/null || die "go is not installed (Go ≥ $GO_MIN is needed to build the test tools)"
    mkdir -p "$dest/bin"
    if [[ ! -x $dest/builder/ocb ]]; then
      log "installing the collector builder $OTELCOL_NODE_VERSION"
      rm -rf "$dest/builder.partial"
      mkdir -p "$dest/builder.partial"
      GOBIN="$dest/builder.partial" go install "$OTELCOL_BUILDER_MODULE@$OTELCOL_NODE_VERSION" \
        || die "cannot install the collector builder $OTELCOL_NODE_VERSION"
      mv "$dest/builder.partial/builder" "$dest/builder.partial/ocb"
      rm -rf "$dest/builder"
      mv "$dest/builder.partial" "$dest/builder"
    fi
    local work="$dest/build.partial"
    rm -rf "$work"
    _otelcol_stubs "$work" "$OTELCOL_NODE_MANIFEST"
    "$dest/builder/ocb" --config="$OTELCOL_NODE_MANIFEST" --output-path="$work" \
      || die "the collector builder failed (see above)"
    [[ -x $work/otelcol-node ]] || die "the collector builder left no binary at $work/otelcol-node"
    mv "$work/otelcol-node" "$dest/bin/otelcol-node.partial"
    mv "$dest/bin/otelcol-node.partial" "$dest/bin/otelcol-node"
    cp "$OTELCOL_NODE_MANIFEST" "$dest/manifest.yaml"
    rm -rf "$dest/src"
    mv "$work" "$dest/src"
  fi
  link otelcol-node "$dest/bin/otelcol-node"
}

version_otelcol_node() {
  printf '%s\n' "$("$TOOLS_BIN/otelcol-node" --version 2>/dev/null | head -1)"
}
