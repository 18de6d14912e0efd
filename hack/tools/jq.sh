# jq, from Debian's package: the decision-log tests run the operations guide's jq
# examples unchanged against the log the hub writes.
JQ_PACKAGE=jq
JQ_BINARY=/usr/bin/jq

install_jq() {
  if [[ ! -x $JQ_BINARY ]]; then
    [[ $(id -u) -eq 0 ]] || die "installing $JQ_PACKAGE needs root (apt-get install $JQ_PACKAGE)"
    command -v apt-get >/dev/null || die "apt-get not found: install jq as $JQ_BINARY"
    log "installing Debian's $JQ_PACKAGE package"
    apt-cache show "$JQ_PACKAGE" >/dev/null 2>&1 || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$JQ_PACKAGE" >&2 \
      || die "apt-get install $JQ_PACKAGE failed"
  fi
  link jq "$JQ_BINARY"
}

version_jq() {
  printf 'jq %s\n' "$("$TOOLS_BIN/jq" --version)"
}
