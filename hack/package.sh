#!/usr/bin/env bash
# Builds the Configuration package with `crossplane xpkg build`.
#
# The package root is assembled in a temporary folder: package/crossplane.yaml plus every
# XRD and Composition under apis/. Only those belong in a Configuration (the AdaptivePolicy
# CRD is installed in member clusters by compose-serving-stack, and the built-in
# MetricMappings are objects a platform team applies).
#
#   hack/package.sh OUT.xpkg
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: hack/package.sh OUT.xpkg}
crossplane=${CROSSPLANE:-$("$repo/hack/tools.sh" --dir)/crossplane}
[[ -x $crossplane ]] || { echo "crossplane not installed: run 'bash hack/tools.sh crossplane'" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp "$repo/package/crossplane.yaml" "$root/"
for dir in "$repo"/apis/*/; do
  plural=$(basename "$dir")
  [[ -f $dir/composition.yaml ]] || continue # a plain CRD, not an XRD
  mkdir -p "$root/apis/$plural"
  cp "$dir/definition.yaml" "$dir/composition.yaml" "$root/apis/$plural/"
done
"$crossplane" xpkg build --package-root="$root" --examples-root="$repo/examples" --package-file="$out"
echo "built $out"
