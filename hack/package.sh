#!/usr/bin/env bash
# Builds the Crossplane packages with `crossplane xpkg build`.
#
#   hack/package.sh OUT.xpkg       the Configuration alone (no Docker needed)
#   hack/package.sh --all OUT_DIR  the runtime image, the four Function packages embedding
#                                  it, then the Configuration depending on exactly them
#
# The Configuration's package root is assembled in a temporary folder: package/crossplane.yaml
# plus every XRD and Composition under apis/. Only those belong in a Configuration (the
# AdaptivePolicy CRD is installed in member clusters by compose-serving-stack, and the
# built-in MetricMappings are objects a platform team applies).
#
# --all: one image (Dockerfile) serves every function and the runtime; its entrypoint takes
# the component from MODELPLANE_COMPONENT when Crossplane starts it with no arguments. So
# each Function package embeds a one-line image on top of the runtime image that sets that
# variable (and MODELPLANE_RUNTIME_IMAGE, the image compose-serving-stack runs in the
# members): the package runs as installed, with no DeploymentRuntimeConfig. The
# Configuration built alongside names each Function as $REGISTRY/function-<name> at exactly
# $VERSION, so the versions agree by construction. Without a reachable Docker daemon it
# says so and builds what it can: the Configuration and each Function package's metadata
# (install those with a DeploymentRuntimeConfig that names an image).
#
# Environment: VERSION (default v<pyproject version>), REGISTRY (default
# ghcr.io/modelplaneai), DOCKER (default docker), CROSSPLANE (default the pinned tool).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage="usage: hack/package.sh OUT.xpkg | hack/package.sh --all OUT_DIR"
crossplane=${CROSSPLANE:-$("$repo/hack/tools.sh" --dir)/crossplane}
[[ -x $crossplane ]] || { echo "crossplane not installed: run 'bash hack/tools.sh crossplane'" >&2; exit 1; }
registry=${REGISTRY:-ghcr.io/modelplaneai}
version=${VERSION:-v$(sed -nE 's/^version = "([^"]+)"$/\1/p' "$repo/pyproject.toml" | head -n1)}
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] \
  || { echo "VERSION must be a semantic version starting with v (got '$version')" >&2; exit 1; }
docker=${DOCKER:-docker}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# configuration OUT.xpkg [pin]: with `pin`, every Function dependency becomes
# $registry/function-<name> at exactly $version.
configuration() {
  local out=$1 pin=${2:-} root="$scratch/configuration"
  mkdir -p "$root"
  if [[ -n $pin ]]; then
    awk -v registry="$registry" -v version="$version" '
      /^ *package: .*\/function-[a-z0-9-]+$/ { sub(/package: .*\//, "package: " registry "/"); print; pinned = 1; next }
      pinned && /^ *version:/ { sub(/version: .*/, "version: \"" version "\""); print; pinned = 0; next }
      { print }' "$repo/package/crossplane.yaml" >"$root/crossplane.yaml"
  else
    cp "$repo/package/crossplane.yaml" "$root/"
  fi
  for dir in "$repo"/apis/*/; do
    plural=$(basename "$dir")
    [[ -f $dir/composition.yaml ]] || continue # a plain CRD, not an XRD
    mkdir -p "$root/apis/$plural"
    cp "$dir/definition.yaml" "$dir/composition.yaml" "$root/apis/$plural/"
  done
  "$crossplane" xpkg build --package-root="$root" --examples-root="$repo/examples" --package-file="$out"
  echo "built $out"
}

if [[ ${1:-} != --all ]]; then
  configuration "${1:?$usage}"
  exit 0
fi

out=${2:?$usage}
mkdir -p "$out"
out=$(cd "$out" && pwd)
have_docker=""
if ! command -v "$docker" >/dev/null 2>&1; then
  why="'$docker' is not installed"
elif ! why=$("$docker" info 2>&1 >/dev/null); then
  why="no Docker daemon answers ($(tail -n1 <<<"$why"))"
else
  have_docker=1
fi
if [[ -z $have_docker ]]; then
  echo "Docker is not available: $why." >&2
  echo "Building the Configuration and each Function package's metadata only (no runtime image)." >&2
else
  runtime="$registry/modelplane:$version"
  echo "building the runtime image $runtime"
  "$docker" build --tag "$runtime" "$repo"
fi

mkdir -p "$scratch/no-examples"
pushes=()
for meta in "$repo"/package/functions/*/crossplane.yaml; do
  name=function-$(basename "$(dirname "$meta")")
  file="$out/$name-$version.xpkg"
  embed=()
  if [[ -n $have_docker ]]; then
    image="$registry/$name:$version"
    # MODELPLANE_RUNTIME_IMAGE: compose-serving-stack composes the member runtime from it.
    printf 'FROM %s\nENV MODELPLANE_COMPONENT=%s MODELPLANE_RUNTIME_IMAGE=%s\n' \
      "$runtime" "$name" "$runtime" \
      | "$docker" build --tag "$image" -
    embed=(--embed-runtime-image="$image")
  fi
  "$crossplane" xpkg build --package-root="$(dirname "$meta")" \
    --examples-root="$scratch/no-examples" "${embed[@]}" --package-file="$file"
  echo "built $file${have_docker:+ (embedding $image)}"
  pushes+=("crossplane xpkg push -f $file $registry/$name:$version")
done
configuration "$out/modelplane-$version.xpkg" pin
pushes+=("crossplane xpkg push -f $out/modelplane-$version.xpkg $registry/configuration-modelplane:$version")

echo
if [[ -n $have_docker ]]; then
  echo "push the Function packages first, then the Configuration:"
else
  echo "without Docker the Function packages carry no runtime; once built with Docker, push:"
fi
printf '  %s\n' "${pushes[@]}"
