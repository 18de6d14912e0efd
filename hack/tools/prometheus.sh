# Prometheus, from Debian's package (2.42 on bookworm): a real server the tests start
# on loopback with --web.enable-remote-write-receiver to receive remote writes.
#
# The package ships a service; the install must not leave it running. Service starts
# from maintainer scripts go through invoke-rc.d / deb-systemd-invoke, which honour
# /usr/sbin/policy-rc.d, so a "deny" policy is put in place for the duration of the
# install when there is none, and anything the package started is stopped afterwards.
PROMETHEUS_PACKAGE=prometheus
PROMETHEUS_BINARY=/usr/bin/prometheus

install_prometheus() {
  if [[ ! -x $PROMETHEUS_BINARY ]]; then
    [[ $(id -u) -eq 0 ]] || die "installing $PROMETHEUS_PACKAGE needs root (apt-get install $PROMETHEUS_PACKAGE)"
    command -v apt-get >/dev/null || die "apt-get not found: install Prometheus 2.x as $PROMETHEUS_BINARY"
    log "installing Debian's $PROMETHEUS_PACKAGE package"
    if ! apt-cache show "$PROMETHEUS_PACKAGE" >/dev/null 2>&1; then
      apt-get update -qq
    fi
    local policy=/usr/sbin/policy-rc.d added=""
    if [[ ! -e $policy ]]; then
      printf '#!/bin/sh\n# Added by modelplane hack/tools/prometheus.sh during an install.\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      added=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PROMETHEUS_PACKAGE" >&2 || rc=$?
    [[ -z $added ]] || rm -f "$policy"
    [[ $rc -eq 0 ]] || die "apt-get install $PROMETHEUS_PACKAGE failed ($rc)"
    _stop_prometheus_service
  fi
  [[ -x $PROMETHEUS_BINARY ]] || die "$PROMETHEUS_BINARY missing after installing $PROMETHEUS_PACKAGE"
  link prometheus "$PROMETHEUS_BINARY"
}

# Stop the packaged service if a maintainer script started it anyway (e.g. a host
# whose policy-rc.d allows starts). Only the service's own process is touched: the one
# in its pid file or the systemd unit, never other prometheus processes.
_stop_prometheus_service() {
  if [[ -d /run/systemd/system ]] && systemctl is-active --quiet prometheus 2>/dev/null; then
    log "stopping the prometheus service the package started"
    systemctl stop prometheus || true
    systemctl disable prometheus >/dev/null 2>&1 || true
  fi
  # The path Debian's /etc/init.d/prometheus writes.
  local pidfile=/run/prometheus/prometheus.pid pid
  if [[ -r $pidfile ]]; then
    pid=$(<"$pidfile")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      log "stopping the prometheus daemon the package started (pid $pid)"
      kill "$pid" || true
    fi
  fi
}

version_prometheus() {
  printf 'prometheus %s\n' "$("$TOOLS_BIN/prometheus" --version 2>&1 | head -1)"
}
