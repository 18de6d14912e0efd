# The OpenTelemetry collector, built with the official collector builder (ocb) from
# hack/tools/otelcol/manifest.yaml. No usable prebuilt collector is on PyPI, npm or
# Debian, so it is compiled here: about 10 minutes on two cores the first time (8.5 of
# them compiling; longer while another build shares the cores), ~2 GB of module
# sources plus the Go build cache.
#
# OTELCOL_VERSION is the collector release of the builder; every component in the
# manifest is at the same release (stable modules at their matching v1.x tag), so
# bump both together. A changed manifest triggers a rebuild on the next run.
OTELCOL_VERSION=v0.161.0
OTELCOL_BUILDER_MODULE=go.opentelemetry.io/collector/cmd/builder
OTELCOL_MANIFEST="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/otelcol/manifest.yaml"

install_otelcol() {
  local dest="$MODELPLANE_TOOLS/otelcol-$OTELCOL_VERSION"
  if [[ ! -x $dest/bin/otelcol ]] || ! cmp -s "$OTELCOL_MANIFEST" "$dest/manifest.yaml"; then
    log "building otelcol $OTELCOL_VERSION (about 10 minutes the first time)"
    command -v go >/dev/null || die "go is not installed (Go ≥ $GO_MIN is needed to build the test tools)"
    mkdir -p "$dest/bin"
    _otelcol_builder "$dest"

    # Generate and compile in a scratch folder; only a finished binary is moved into
    # bin/, so an interrupted build never leaves a half binary behind.
    local work="$dest/build.partial"
    rm -rf "$work"
    _otelcol_stubs "$work"
    # --output-path overrides dist.output_path (the builder marks the flag deprecated
    # in favour of the manifest key, but it is the only override it takes).
    "$dest/builder/ocb" --config="$OTELCOL_MANIFEST" --output-path="$work" \
      || die "the collector builder failed (see above)"
    [[ -x $work/otelcol ]] || die "the collector builder left no binary at $work/otelcol"
    mv "$work/otelcol" "$dest/bin/otelcol.partial"
    mv "$dest/bin/otelcol.partial" "$dest/bin/otelcol"
    cp "$OTELCOL_MANIFEST" "$dest/manifest.yaml"
    # Keep the generated sources and the resolved go.mod for reference; drop the rest.
    rm -rf "$dest/src"
    mv "$work" "$dest/src"
  fi
  link otelcol "$dest/bin/otelcol"
}

# _otelcol_builder DEST: install the collector builder at the pinned release as
# DEST/builder/ocb.
_otelcol_builder() {
  local dir="$1/builder"
  [[ -x $dir/ocb ]] && return 0
  log "installing the collector builder $OTELCOL_VERSION"
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial"
  if ! GOBIN="$dir.partial" go install "$OTELCOL_BUILDER_MODULE@$OTELCOL_VERSION"; then
    # The proxy refuses the version list of some modules; build from the module's
    # own folder instead, which is what `go install pkg@version` does anyway.
    log "go install failed; building the builder from its module folder"
    local src
    src=$(go_module_dir "$OTELCOL_BUILDER_MODULE" "$OTELCOL_VERSION")
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $OTELCOL_BUILDER_MODULE/internal.version=$OTELCOL_VERSION" \
      -o "$dir.partial/builder" .) || die "cannot build the collector builder"
  fi
  mv "$dir.partial/builder" "$dir.partial/ocb"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
}

# _otelcol_stubs DIR [MANIFEST]: for each `- MODULE => ./stubs/NAME` line under the
# manifest's replaces (OTELCOL_MANIFEST by default), write an empty module MODULE with one
# empty package NAME at DIR/stubs/NAME.
# Such modules are only imported by components' integration tests, which `go mod tidy`
# still resolves, and the module proxy does not serve them.
_otelcol_stubs() {
  local module name
  while read -r module name; do
    mkdir -p "$1/stubs/$name"
    printf 'module %s\n\ngo 1.25\n' "$module" >"$1/stubs/$name/go.mod"
    printf '// Package %s is an empty stand-in; see hack/tools/otelcol/manifest.yaml.\npackage %s\n' \
      "$name" "$name" >"$1/stubs/$name/stub.go"
  done < <(sed -nE 's#^[[:space:]]*-[[:space:]]*([^[:space:]]+)[[:space:]]*=>[[:space:]]*\./stubs/([A-Za-z0-9_]+)[[:space:]]*$#\1 \2#p' \
    "${2:-$OTELCOL_MANIFEST}")
}

version_otelcol() {
  printf '%s\n' "$("$TOOLS_BIN/otelcol" --version 2>/dev/null | head -1)"
}
