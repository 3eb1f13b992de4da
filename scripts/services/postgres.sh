#!/usr/bin/env bash
# PostgreSQL (Debian's packages, /usr/lib/postgresql/<major>/bin) as Airflow's metadata database
# for the production-topology tier (`make test-prod`), without Docker.
#
#   scripts/services/postgres.sh start DIR PORT   a fresh cluster on 127.0.0.1:PORT (in DIR/data, or
#                                                 under root in /tmp/replay-pg.*, removed by stop),
#                                                 with database and role `airflow`
#   scripts/services/postgres.sh stop DIR         stop it (fast shutdown)
#   scripts/services/postgres.sh driver           install psycopg (Airflow's driver) into .cache/pgpy
#
# The role's password comes from PGPASSWORD (default: a random one, printed as the URL on stdout:
# `postgresql+psycopg://airflow:...@127.0.0.1:PORT/airflow`). PostgreSQL refuses to run as root:
# under root the cluster belongs to the `postgres` user (or `nobody`), via runuser.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[[ -x "$PG_BIN/initdb" ]] || { echo "postgres: no PostgreSQL binaries (apt-get install postgresql)" >&2; exit 1; }

as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    local user=postgres; id postgres >/dev/null 2>&1 || user=nobody
    runuser -u "$user" -- "$@"
  else
    "$@"
  fi
}

driver() {
  # psycopg 3 (SQLAlchemy's postgresql+psycopg), kept out of the lock like the compose tool:
  # only this tier talks to PostgreSQL. Added to PYTHONPATH of the Airflow processes.
  if [[ ! -d "$ROOT/.cache/pgpy/psycopg" ]]; then
    "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$ROOT/.cache/pgpy" psycopg==3.3.9 psycopg-binary==3.3.9
  fi
  echo "$ROOT/.cache/pgpy"
}

start() {
  local dir="$1" port="$2" password="${PGPASSWORD:-$(python3 -c 'import secrets; print(secrets.token_hex(12))')}"
  mkdir -p "$dir"
  local data="$dir/data"
  if [[ "$(id -u)" == 0 ]]; then
    # The server's user must reach its data directory, which DIR (often 0700, root's) may not
    # allow: the cluster lives in a directory of its own under /tmp, named in DIR/datadir.
    data="$(mktemp -d /tmp/replay-pg.XXXXXX)"
    chown "$(id -u postgres 2>/dev/null || id -u nobody)" "$data"
  fi
  mkdir -p "$data"
  echo "$data" > "$dir/datadir"
  local pwfile; pwfile="$(mktemp)"; printf '%s\n' "$password" > "$pwfile"; chmod 644 "$pwfile"
  as_owner "$PG_BIN/initdb" -D "$data" -U airflow --pwfile="$pwfile" -A scram-sha-256 -E UTF8 \
    --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; rm -f "$pwfile"; exit 1; }
  rm -f "$pwfile"
  # 127.0.0.1 only, no Unix socket outside the data dir; fsync off: a test database.
  as_owner "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$data -c fsync=off -c max_connections=100" >/dev/null
  PGPASSWORD="$password" "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U airflow -d postgres -qc "CREATE DATABASE airflow" \
    2>/dev/null || as_owner "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U airflow airflow 2>/dev/null || true
  echo "postgresql+psycopg://airflow:$password@127.0.0.1:$port/airflow"
}

stop() {
  local dir="$1" data
  [[ -f "$dir/datadir" ]] || return 0
  data="$(cat "$dir/datadir")"
  if [[ -f "$data/postmaster.pid" ]]; then
    as_owner "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || true
  fi
  if [[ "$data" == /tmp/replay-pg.* ]]; then rm -rf "$data"; fi
  rm -f "$dir/datadir"
}

case "${1:-}" in
  start) start "$2" "$3" ;;
  stop) stop "$2" ;;
  driver) driver ;;
  *) echo "usage: $0 start DIR PORT | stop DIR | driver" >&2; exit 2 ;;
esac
