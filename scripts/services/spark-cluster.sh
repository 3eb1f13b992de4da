#!/usr/bin/env bash
# A Spark standalone cluster (one master, one worker) from the pip-installed Spark, for the cluster
# tier (`make test-cluster`) and the production-topology tier (`make test-prod`).
#
#   scripts/services/spark-cluster.sh start DIR PORT   master on 127.0.0.1:PORT and one worker,
#                                                      logs and work dirs in DIR; waits until the
#                                                      worker has registered; prints spark://...
#   scripts/services/spark-cluster.sh stop DIR         stop both (SIGTERM, then SIGKILL)
#
# Everything binds 127.0.0.1 (SPARK_LOCAL_IP); the web UIs take free ports. Drivers on this machine
# need SPARK_LOCAL_IP=127.0.0.1 too: the executors connect back to the address a driver advertises.
# Executors run the project's Python (.venv/bin/python, PYSPARK_PYTHON) and get Delta's and S3A's
# jars from the drivers (spark.jars). SPARK_WORKER_CORES / SPARK_WORKER_MEMORY size the worker (default 2, 2g).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SPARK_CLASS="${SPARK_CLASS:-$ROOT/.venv/bin/spark-class}"
# shellcheck source=daemons.sh
source "$(dirname "$0")/daemons.sh"

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

launch() {  # launch NAME CLASS ARGS...: one daemon in its own session, its pid in DIR/NAME.pid
  local name="$1"; shift
  setsid "$SPARK_CLASS" "$@" >"$DIR/$name.log" 2>&1 < /dev/null &
  echo $! > "$DIR/$name.pid"
}

start() {
  DIR="$1"; local port="$2"
  [[ -x "$SPARK_CLASS" ]] || { echo "spark-cluster: $SPARK_CLASS not found (run make setup)" >&2; exit 1; }
  mkdir -p "$DIR/work"
  local ports ui worker worker_ui
  ports=($(free_ports 3)); ui=${ports[0]} worker=${ports[1]} worker_ui=${ports[2]}
  export SPARK_LOCAL_IP=127.0.0.1 SPARK_WORKER_DIR="$DIR/work" PYSPARK_PYTHON="${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}"
  launch master org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$port" --webui-port "$ui"
  launch worker org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$port" --host 127.0.0.1 \
    --port "$worker" --webui-port "$worker_ui" --cores "${SPARK_WORKER_CORES:-2}" \
    --memory "${SPARK_WORKER_MEMORY:-2g}" --work-dir "$DIR/work"
  local deadline=$((SECONDS + 180))
  until curl -s "http://127.0.0.1:$ui/json/" | grep -q '"aliveworkers" *: *[1-9]'; do
    if (( SECONDS > deadline )) || ! kill -0 "$(cat "$DIR/master.pid")" 2>/dev/null \
        || ! kill -0 "$(cat "$DIR/worker.pid")" 2>/dev/null; then
      echo "spark-cluster: no worker registered with spark://127.0.0.1:$port" >&2
      tail -20 "$DIR/master.log" "$DIR/worker.log" >&2; stop "$DIR"; exit 1
    fi
    sleep 1
  done
  echo "spark-cluster: master UI http://127.0.0.1:$ui, logs in $DIR"
  echo "spark://127.0.0.1:$port"
}

stop() {
  local name
  for name in worker master; do stop_daemon "$1/$name.pid" 20; done
}

case "${1:-}" in
  start) start "$2" "$3" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
