# Crossplane: the CLI (crank) that renders, validates and builds packages, and Crossplane
# core (cmd/crossplane), which the fleet box runs out of cluster. Two versions, on purpose:
#
# - CLI v2.2.1. From v2.3 the CLI lives in another module (github.com/crossplane/cli/v2)
#   which the Go module proxy here refuses, and whose `render` drives a core binary or
#   Docker; the 2.2 line renders in-process. v2.2.1, not v2.2.4: the proxy refuses
#   v2.2.2–v2.2.4 of github.com/crossplane/crossplane/v2 (403). `make demo` and
#   `make render` need only this build (`crossplane`), never core's.
# - Core v2.3.0 (`crossplane_core`). The first release whose XRD has
#   `spec.versions[].subresources.scale`: ModelDeployment's scale subresource (what
#   `kubectl scale` and an HPA or KEDA ScaledObject use) needs it. A v2.2 core rejects the
#   field. v2.3.0's go.mod replaces github.com/crossplane/crossplane/apis/v2 with its own
#   ./apis folder, which only applies inside its repo, so core is built in a wrapper
#   module that requires that apis module at the pseudo-version v2.3.0 names (the proxy
#   serves it). Its version string moved to crossplane-runtime's pkg/version (the ldflag
#   below); without it package dependency constraints (">=v2.0.0") fail.
#
# Crossplane's own schemas (its CRDs: what `crossplane beta validate` checks our claims'
# Crossplane parts against, and what the fleet box applies before starting core) come
# from core's version, v2.3.0, so both know `subresources`. Laying them out needs only the
# module's source, not the core build.
CROSSPLANE_VERSION=v2.2.1
CROSSPLANE_MODULE=github.com/crossplane/crossplane/v2
CROSSPLANE_CORE_VERSION=v2.3.0
CROSSPLANE_APIS_MODULE=github.com/crossplane/crossplane/apis/v2
CROSSPLANE_APIS_VERSION=v2.0.0-20260424160951-8f231230ebb6
# `crossplane beta validate` always looks for Crossplane's own schemas under this image
# ref; the installer lays the folder out from the module so validation runs offline.
CROSSPLANE_IMAGE="xpkg.crossplane.io/crossplane/crossplane:$CROSSPLANE_CORE_VERSION"

install_crossplane() {
  local dest="$MODELPLANE_TOOLS/crossplane-$CROSSPLANE_VERSION"
  if [[ ! -x $dest/bin/crossplane ]]; then
    log "building the crossplane CLI $CROSSPLANE_VERSION (3-6 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$CROSSPLANE_MODULE" "$CROSSPLANE_VERSION")
    rm -rf "$dest/bin.partial"
    mkdir -p "$dest/bin" "$dest/bin.partial"
    (cd "$src" && go build -trimpath \
      -ldflags "-s -w -X $CROSSPLANE_MODULE/internal/version.version=$CROSSPLANE_VERSION" \
      -o "$dest/bin.partial/" ./cmd/crank)
    mv "$dest/bin.partial/crank" "$dest/bin/crossplane"
    rm -rf "$dest/bin.partial"
    log "built the crossplane CLI in $((SECONDS - started)) s"
  fi
  link crossplane "$dest/bin/crossplane"
  _crossplane_schemas
}

# Core's CRDs, from core's module: the fleet box applies them (core init is not run out of
# cluster), and the validate cache holds them under the image ref of core's version.
_crossplane_schemas() {
  local dest="$MODELPLANE_TOOLS/crossplane-core-$CROSSPLANE_CORE_VERSION"
  local cache="$dest/validate-cache/${CROSSPLANE_IMAGE/:/@}"
  if [[ ! -d $cache || ! -d $dest/crds ]]; then
    local src
    src=$(go_module_dir "$CROSSPLANE_MODULE" "$CROSSPLANE_CORE_VERSION")
    rm -rf "$dest/crds" "$dest/validate-cache"
    mkdir -p "$dest/crds" "$cache"
    cp "$src"/cluster/crds/*.yaml "$dest/crds/"
    cp "$src"/cluster/crds/*.yaml "$cache/"
    chmod -R u+w "$dest/crds" "$dest/validate-cache"
  fi
  ln -sfn "$dest/crds" "$MODELPLANE_TOOLS/crossplane-crds"
  # Where `crossplane beta validate --cache-dir` finds Crossplane's schemas offline.
  ln -sfn "$dest/validate-cache" "$MODELPLANE_TOOLS/crossplane-validate-cache"
  printf '%s\n' "$CROSSPLANE_IMAGE" >"$MODELPLANE_TOOLS/crossplane-image"
}

install_crossplane_core() {
  local dest="$MODELPLANE_TOOLS/crossplane-core-$CROSSPLANE_CORE_VERSION"
  if [[ ! -x $dest/bin/crossplane-core ]]; then
    log "building crossplane core $CROSSPLANE_CORE_VERSION (3-6 minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$CROSSPLANE_MODULE" "$CROSSPLANE_CORE_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/crossplane-core\n\n'
      grep -E '^go ' "$src/go.mod"
      printf '\nrequire (\n\t%s %s\n\t%s %s\n)\n' \
        "$CROSSPLANE_MODULE" "$CROSSPLANE_CORE_VERSION" \
        "$CROSSPLANE_APIS_MODULE" "$CROSSPLANE_APIS_VERSION"
    } >"$dest/wrapper/go.mod"
    _build_in_wrapper "$dest/wrapper" "$dest/bin" \
      "-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$CROSSPLANE_CORE_VERSION" \
      "$CROSSPLANE_MODULE/cmd/crossplane" || die "cannot build crossplane core (see above)"
    mv "$dest/bin/crossplane" "$dest/bin/crossplane-core"
    log "built crossplane core in $((SECONDS - started)) s"
  fi
  link crossplane-core "$dest/bin/crossplane-core"
  _crossplane_schemas
}

version_crossplane() {
  printf 'crossplane %s (CLI; Crossplane schemas of core %s)\n' \
    "$("$TOOLS_BIN/crossplane" version --client 2>/dev/null | head -1)" "$CROSSPLANE_CORE_VERSION"
}

version_crossplane_core() {
  printf 'crossplane-core %s\n' "$CROSSPLANE_CORE_VERSION"
}
