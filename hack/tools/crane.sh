# crane (github.com/google/go-containerregistry, cmd/crane): `crane registry serve` is a
# loopback OCI registry, the one the package-install test (tests/e2e/test_package_install.py)
# pushes our packages and the providers' to, so Crossplane's package manager resolves
# and pulls the Configuration's dependencies as it does from a real registry (through an
# ImageConfig that rewrites the packages' registries to it, as a mirror would).
#
# v0.21.2: the go-containerregistry Crossplane core v2.3.0 is built with. Built inside the
# module's own folder (its go.mod and go.sum), like the crossplane CLI.
CRANE_VERSION=v0.21.2
CRANE_MODULE=github.com/google/go-containerregistry

install_crane() {
  local dest="$MODELPLANE_TOOLS/crane-$CRANE_VERSION"
  if [[ ! -x $dest/bin/crane ]]; then
    log "building crane $CRANE_VERSION (1-3 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$CRANE_MODULE" "$CRANE_VERSION")
    rm -rf "$dest/bin.partial"
    mkdir -p "$dest/bin.partial"
    (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$dest/bin.partial/" ./cmd/crane) \
      || die "cannot build crane (see above)"
    mkdir -p "$dest/bin"
    mv "$dest/bin.partial/crane" "$dest/bin/crane"
    rm -rf "$dest/bin.partial"
    log "built crane in $((SECONDS - started)) s"
  fi
  link crane "$dest/bin/crane"
}

version_crane() {
  printf 'crane %s\n' "$CRANE_VERSION" # built from the module cache, it reports (devel)
}
