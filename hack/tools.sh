#!/usr/bin/env bash
# Installs the pinned tools the tests run against into a cache outside the checkout,
# idempotently, then prints their versions.
#
# Each tool lives in hack/tools/<name>.sh, which sets its pinned version and defines
# install_<name>. A tool is built once into $MODELPLANE_TOOLS/<name>-<version>/ and
# linked into $MODELPLANE_TOOLS/bin; a second run only re-links and prints versions.
#
#   bash hack/tools.sh            install every tool
#   bash hack/tools.sh crossplane install the named tools only
#   bash hack/tools.sh --dir      print the bin directory (for Make and the tests)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MODELPLANE_TOOLS=${MODELPLANE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/tools}
export TOOLS_BIN="$MODELPLANE_TOOLS/bin"
# Builds use the Go on this machine; never let a go.mod pull another toolchain.
export GOTOOLCHAIN=local
# Every tool in the order it is installed. Later issues append theirs here.
ALL_TOOLS=(crossplane crossplane_core provider_kubernetes etcd kube_apiserver kwok otelcol otelcol_node prometheus jq schemas keda lws vllm coredns helm crane)

if [[ ${1:-} == --dir ]]; then
  echo "$TOOLS_BIN"
  exit 0
fi

# The step a tool is on, for the progress ticker (a cold build runs for many minutes).
step_file=$(mktemp)
ticker=
trap 'rm -f "$step_file"; [[ -z $ticker ]] || kill "$ticker" 2>/dev/null || true' EXIT
log() {
  printf '[tools] %s\n' "$*" >&2
  printf '%s' "$*" >"$step_file"
}
die() { printf '[tools] error: %s\n' "$*" >&2; exit 1; }

# link NAME PATH: expose a built binary as $TOOLS_BIN/NAME.
link() {
  mkdir -p "$TOOLS_BIN"
  ln -sfn "$2" "$TOOLS_BIN/$1"
}

# go_module_dir MODULE VERSION: download a module into the module cache and print its
# directory. Building inside that directory uses the module's own go.mod and go.sum,
# which is what `go install pkg@version` would do, without the version-list lookup
# the proxy refuses for some modules.
# The oldest Go that builds every pinned tool: KEDA v2.21.0's go.mod says go 1.26.0 (the
# README and docs/testing.md state the same; tests/package/test_docs.py holds them to it).
GO_MIN=1.26

go_module_dir() {
  command -v go >/dev/null || die "go is not installed (Go ≥ $GO_MIN is needed to build the test tools)"
  local json
  json=$(go mod download -json "$1@$2") || die "cannot download Go module $1@$2: $json"
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error","no Dir")))' <<<"$json"
}

# _build_in_wrapper DIR OUTDIR LDFLAGS PKG...: DIR holds a go.mod written by the caller
# (a throwaway module outside the checkout that requires the release and pins what its
# replace directives would have). Add each PKG as a tool, resolve go.sum, build them all
# in one `go build` into a partial folder, then move each binary into OUTDIR.
_build_in_wrapper() {
  local dir=$1 outdir=$2 ldflags=$3
  shift 3
  local pkg
  (
    cd "$dir"
    for pkg in "$@"; do printf '\ntool %s\n' "$pkg" >>go.mod; done
    go mod tidy
    rm -rf "$outdir.partial"
    mkdir -p "$outdir.partial"
    go build -trimpath -ldflags "-s -w $ldflags" -o "$outdir.partial/" "$@"
  )
  mkdir -p "$outdir"
  local name
  for pkg in "$@"; do
    # go build names a binary after the last path element, skipping a /vN suffix.
    name=${pkg##*/}
    [[ $name =~ ^v[0-9]+$ ]] && { name=${pkg%/*}; name=${name##*/}; }
    mv "$outdir.partial/$name" "$outdir/$name"
  done
  rm -rf "$outdir.partial"
}

for f in "$here"/tools/*.sh; do
  # shellcheck source=/dev/null
  source "$f"
done

wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=("${ALL_TOOLS[@]}")
for tool in "${wanted[@]}"; do
  declare -F "install_$tool" >/dev/null || die "no such tool: $tool (known: ${ALL_TOOLS[*]})"
  # While a tool installs, say every minute which step it is on and for how long, so a
  # cold build never looks hung.
  started_at=$SECONDS
  printf '%s: checking' "$tool" >"$step_file"
  (
    # The sleep is killed with the ticker: an orphaned sleep would hold a piped stderr
    # open, and whoever reads it would wait up to a minute after the last tool.
    nap=
    trap '[[ -z $nap ]] || kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "${MODELPLANE_TOOLS_TICK:-60}" &
      nap=$!
      wait "$nap"
      printf '[tools] … %s (%d s so far)\n' "$(cat "$step_file")" $((SECONDS - started_at)) >&2
    done
  ) &
  ticker=$!
  "install_$tool"
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  ticker=
  elapsed=$((SECONDS - started_at))
  [[ $elapsed -lt 5 ]] || log "$tool ready after $elapsed s"
done

log "installed into $TOOLS_BIN:"
for tool in "${wanted[@]}"; do
  "version_$tool" | sed 's/^/  /' >&2
done
