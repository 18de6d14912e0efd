# The Crossplane CLI (crank) and Crossplane core (cmd/crossplane, which the fleet box
# runs out of cluster), built from one Go module in one `go build` so they share
# compiled packages. The version ldflag matters for core: without it package
# dependency constraints (">=v2.0.0") fail.
#
# v2.2.1, not v2.2.4: the Go module proxy here refuses v2.2.2–v2.2.4 of
# github.com/crossplane/crossplane/v2 (403), and v2.2.1 is the nearest release it
# serves. From v2.3 the CLI moved to another module whose `render` needs a core binary
# or Docker, so the 2.2 line is the one that renders in-process.
CROSSPLANE_VERSION=v2.2.1
CROSSPLANE_MODULE=github.com/crossplane/crossplane/v2
# `crossplane beta validate` always looks for Crossplane's own schemas under this image
# ref; the installer lays the folder out from the module so validation runs offline.
CROSSPLANE_IMAGE="xpkg.crossplane.io/crossplane/crossplane:$CROSSPLANE_VERSION"

install_crossplane() {
  local dest="$MODELPLANE_TOOLS/crossplane-$CROSSPLANE_VERSION"
  local cache="$dest/validate-cache/${CROSSPLANE_IMAGE/:/@}"
  if [[ ! -x $dest/bin/crossplane || ! -x $dest/bin/crossplane-core || ! -d $cache || ! -d $dest/crds ]]; then
    log "building crossplane (CLI and core) $CROSSPLANE_VERSION (5-10 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$CROSSPLANE_MODULE" "$CROSSPLANE_VERSION")
    mkdir -p "$dest/bin"
    rm -rf "$dest/bin.partial"
    mkdir -p "$dest/bin.partial"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $CROSSPLANE_MODULE/internal/version.version=$CROSSPLANE_VERSION" \
      -o "$dest/bin.partial/" ./cmd/crank ./cmd/crossplane)
    mv "$dest/bin.partial/crank" "$dest/bin/crossplane"
    mv "$dest/bin.partial/crossplane" "$dest/bin/crossplane-core"
    rm -rf "$dest/bin.partial"
    log "built crossplane CLI and core in $((SECONDS - started)) s"
    mkdir -p "$cache"
    cp "$src"/cluster/crds/*.yaml "$cache/"
    chmod -R u+w "$cache"
    # Core's own CRDs, applied by the fleet box (core init is not run out of cluster).
    rm -rf "$dest/crds"
    mkdir -p "$dest/crds"
    cp "$src"/cluster/crds/*.yaml "$dest/crds/"
    chmod -R u+w "$dest/crds"
  fi
  link crossplane "$dest/bin/crossplane"
  link crossplane-core "$dest/bin/crossplane-core"
  ln -sfn "$dest/crds" "$MODELPLANE_TOOLS/crossplane-crds"
  # Where `crossplane beta validate --cache-dir` finds Crossplane's schemas offline.
  ln -sfn "$dest/validate-cache" "$MODELPLANE_TOOLS/crossplane-validate-cache"
  printf '%s\n' "$CROSSPLANE_IMAGE" >"$MODELPLANE_TOOLS/crossplane-image"
}

version_crossplane() {
  printf 'crossplane %s\n' "$("$TOOLS_BIN/crossplane" version --client 2>/dev/null | head -1)"
  printf 'crossplane-core %s\n' "$CROSSPLANE_VERSION"
}
