# The Crossplane CLI (crank), built from its Go module.
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
  if [[ ! -x $dest/bin/crossplane || ! -d $cache ]]; then
    log "building crossplane $CROSSPLANE_VERSION (a few minutes the first time)"
    local src
    src=$(go_module_dir "$CROSSPLANE_MODULE" "$CROSSPLANE_VERSION")
    mkdir -p "$dest/bin"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $CROSSPLANE_MODULE/internal/version.version=$CROSSPLANE_VERSION" \
      -o "$dest/bin/crossplane.partial" ./cmd/crank)
    mv "$dest/bin/crossplane.partial" "$dest/bin/crossplane"
    mkdir -p "$cache"
    cp "$src"/cluster/crds/*.yaml "$cache/"
    chmod -R u+w "$cache"
  fi
  link crossplane "$dest/bin/crossplane"
  # Where `crossplane beta validate --cache-dir` finds Crossplane's schemas offline.
  ln -sfn "$dest/validate-cache" "$MODELPLANE_TOOLS/crossplane-validate-cache"
  printf '%s\n' "$CROSSPLANE_IMAGE" >"$MODELPLANE_TOOLS/crossplane-image"
}

version_crossplane() {
  printf 'crossplane %s\n' "$("$TOOLS_BIN/crossplane" version --client 2>/dev/null | head -1)"
}
