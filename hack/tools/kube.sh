# A real kube-apiserver and the etcd it stores into, for tests that need an API server
# (Leases, CRDs with CEL validation, server-side apply, dry-run) without a cluster, and
# the rest of the control plane the fleet box runs beside it: kube-controller-manager
# (garbage collector, namespaces, HPA), kube-scheduler, and a kubectl at the API
# server's release (Debian's is years outside the supported skew). All four are built
# in ONE `go build` of one wrapper module so they share every compiled package: the
# apiserver alone is most of the cost, the other three add a few minutes.
#
# v1.35.8: the newest 1.35 patch the Go module proxy here serves (it refuses v1.35.7
# and anything after v1.35.8 with 403). Its go.mod says go 1.25 and it builds with the
# local Go 1.26. ETCD_VERSION is what that release pins for go.etcd.io/etcd/server/v3;
# the kube-apiserver install checks the two still agree.
KUBE_VERSION=v1.35.8
ETCD_VERSION=v3.6.5
KUBE_MODULE=k8s.io/kubernetes
ETCD_MODULE=go.etcd.io/etcd/server/v3

KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module
# (k8s.io/api, k8s.io/apimachinery, ...) with ./staging/src/... and requires them at
# v0.0.0. The wrapper module requires the release and replaces each of those modules,
# the list read from the release's own replace block, with its published v0.N.M.
install_kube_apiserver() {
  local dest="$MODELPLANE_TOOLS/kube-$KUBE_VERSION" b missing=""
  for b in "${KUBE_BINARIES[@]}"; do [[ -x $dest/bin/$b ]] || missing=1; done
  if [[ -n $missing ]]; then
    log "building ${KUBE_BINARIES[*]} $KUBE_VERSION (15-30 minutes on 2 cores the first time)"
    local src staging pinned_etcd minor
    src=$(go_module_dir "$KUBE_MODULE" "$KUBE_VERSION")
    staging="v0.${KUBE_VERSION#v1.}"
    minor=${KUBE_VERSION#v1.}
    minor=${minor%%.*}
    pinned_etcd=$(awk -v m="$ETCD_MODULE" '$1 == m {print $2; exit}' "$src/go.mod")
    [[ $pinned_etcd == "$ETCD_VERSION" ]] ||
      die "kube $KUBE_VERSION pins $ETCD_MODULE $pinned_etcd but ETCD_VERSION is $ETCD_VERSION"
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/kube\n\n'
      # Same language version and GODEBUG defaults as the release's own build.
      grep -E '^(go|godebug) ' "$src/go.mod"
      printf '\nrequire %s %s\n\nreplace (\n' "$KUBE_MODULE" "$KUBE_VERSION"
      awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// {printf "\t%s => %s %s\n", $1, $1, v}' "$src/go.mod"
      printf ')\n'
    } >"$dest/wrapper/go.mod"
    grep -q "k8s.io/apimachinery => k8s.io/apimachinery $staging" "$dest/wrapper/go.mod" ||
      die "found no staging replace directives in $src/go.mod"
    local date
    date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Time"])' \
      "$(go env GOMODCACHE)/cache/download/$KUBE_MODULE/@v/$KUBE_VERSION.info")
    local ldflags="" pkg
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
      ldflags+=" -X $pkg.buildDate=$date"
    done
    local pkgs=()
    for b in "${KUBE_BINARIES[@]}"; do pkgs+=("$KUBE_MODULE/cmd/$b"); done
    local started=$SECONDS
    _build_in_wrapper "$dest/wrapper" "$dest/bin" "$ldflags" "${pkgs[@]}"
    log "built ${KUBE_BINARIES[*]} in $((SECONDS - started)) s"
  fi
  for b in "${KUBE_BINARIES[@]}"; do link "$b" "$dest/bin/$b"; done
}

version_kube_apiserver() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    printf '%s %s\n' "$b" "$("$TOOLS_BIN/$b" --version 2>&1 | head -1)"
  done
  printf 'kubectl %s\n' "$("$TOOLS_BIN/kubectl" version --client 2>&1 | head -1)"
}

# go.etcd.io/etcd/server/v3 is the etcd binary's main package. Its go.mod replaces the
# other etcd modules with ../api and so on, which do not exist in the module cache, so
# it is built in a wrapper module as well; that module's requirements pin the sibling
# etcd modules at the same release.
install_etcd() {
  local dest="$MODELPLANE_TOOLS/etcd-$ETCD_VERSION"
  if [[ ! -x $dest/bin/etcd ]]; then
    log "building etcd $ETCD_VERSION (a few minutes the first time)"
    local src
    src=$(go_module_dir "$ETCD_MODULE" "$ETCD_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/etcd\n\n'
      grep -E '^go ' "$src/go.mod"
      printf '\nrequire %s %s\n' "$ETCD_MODULE" "$ETCD_VERSION"
    } >"$dest/wrapper/go.mod"
    _build_in_wrapper "$dest/wrapper" "$dest/bin" "" "$ETCD_MODULE"
    mv "$dest/bin/server" "$dest/bin/etcd"
  fi
  link etcd "$dest/bin/etcd"
}

version_etcd() {
  printf 'etcd %s\n' "$("$TOOLS_BIN/etcd" --version 2>&1 | head -1)"
}
