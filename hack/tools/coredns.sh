# CoreDNS (github.com/coredns/coredns), one per fleet-box member: its kubernetes plugin
# reads that member's API server (Services, EndpointSlices, Pods) and answers
# cluster.local as a cluster's DNS does — Service names, headless-Service pod records
# (hostname.subdomain) and the pod subdomain — so a real pod the pod runner starts
# resolves its peers through cluster DNS, not through written host files
# (hack/fleetbox/dns.py starts it).
#
# v1.15.0: the newest release the Go module proxy serves (it lists v1.14.3 – v1.15.0).
# Its go.mod says go 1.26.0 and has no replace or exclude directives. The release's own
# main package (every plugin of its plugin.cfg) is built unchanged in a wrapper module
# that requires the release, as the other tools are.
COREDNS_VERSION=v1.15.0
COREDNS_MODULE=github.com/coredns/coredns

install_coredns() {
  local dest="$MODELPLANE_TOOLS/coredns-$COREDNS_VERSION"
  if [[ ! -x $dest/bin/coredns ]]; then
    log "building coredns $COREDNS_VERSION (a few minutes the first time)"
    local src started=$SECONDS
    src=$(go_module_dir "$COREDNS_MODULE" "$COREDNS_VERSION")
    rm -rf "$dest/wrapper"
    mkdir -p "$dest/wrapper" "$dest/bin"
    {
      printf 'module modelplane.local/tools/coredns\n\n'
      grep -E '^(go|godebug) ' "$src/go.mod"
      printf '\nrequire %s %s\n' "$COREDNS_MODULE" "$COREDNS_VERSION"
    } >"$dest/wrapper/go.mod"
    # The release's Makefile stamps the commit; the module proxy records the tag's.
    local info commit
    info="$(go env GOMODCACHE)/cache/download/$COREDNS_MODULE/@v/$COREDNS_VERSION.info"
    commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("Origin", {}).get("Hash", "unknown")[:7])' "$info")
    _build_in_wrapper "$dest/wrapper" "$dest/bin" \
      "-X $COREDNS_MODULE/coremain.GitCommit=$commit" "$COREDNS_MODULE"
    log "built coredns in $((SECONDS - started)) s"
  fi
  link coredns "$dest/bin/coredns"
}

version_coredns() {
  printf '%s\n' "$("$TOOLS_BIN/coredns" -version 2>&1 | head -1)"
}
