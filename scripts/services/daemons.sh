# Sourced by the service scripts: stopping a daemon started in its own session (setsid), one home.
#
#   stop_daemon PIDFILE [SECONDS]   SIGTERM to the daemon's process group, wait up to SECONDS
#                                   (default 10) for its leader to exit, then SIGKILL the group;
#                                   removes PIDFILE. Nothing to do when PIDFILE is missing.
stop_daemon() {
  local pidfile="$1" seconds="${2:-10}" pid
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((seconds * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pidfile"
}
