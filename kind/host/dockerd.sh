#!/usr/bin/env bash
# Makes a Docker daemon answer: uses the one that does, else starts Debian's dockerd (installing
# it first) and records that it did, so `dockerd.sh stop` stops only a daemon it started.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
pidfile=$STATE_DIR/dockerd.pid

start() {
  if docker_answers; then
    say "using the Docker daemon that answers"
    return
  fi
  need_root "starting dockerd"
  "$REPO_ROOT/kind/host/packages.sh" >&2
  mkdir -p "$STATE_DIR"
  local args=(--host unix:///var/run/docker.sock --storage-driver overlay2)
  # CAP_SYS_RESOURCE is bit 24 of the bounding set.
  local bounding
  bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  if (((16#$bounding >> 24 & 1) == 0)); then
    say "this host's capability bounding set lacks CAP_SYS_RESOURCE: privileged containers (kind's nodes) run under kind/host/runc-drop-sys-resource, which drops it"
    # A copy outside the clone: the daemon may outlive it.
    local wrapper=$CACHE_ROOT/host/runc-drop-sys-resource
    install -D "$REPO_ROOT/kind/host/runc-drop-sys-resource" "$wrapper"
    args+=(--add-runtime "drop-sys-resource=$wrapper" --default-runtime drop-sys-resource)
  fi
  say "starting dockerd (log: $STATE_DIR/dockerd.log)"
  nohup dockerd "${args[@]}" >"$STATE_DIR/dockerd.log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 60); do
    docker_answers && { say "dockerd answers"; return; }
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { tail -20 "$STATE_DIR/dockerd.log" >&2; die "dockerd exited"; }
    sleep 1
  done
  die "dockerd did not answer within 60 s; see $STATE_DIR/dockerd.log"
}

stop() {
  [[ -f $pidfile ]] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping the dockerd this tier started (pid $pid)"
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$pidfile"
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  *) die "usage: dockerd.sh start|stop" ;;
esac
