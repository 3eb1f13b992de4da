#!/usr/bin/env bash
# SeaweedFS (a real S3-compatible server) for the production-topology tier (`make test-prod`).
#
#   scripts/services/seaweedfs.sh build            build `weed` once into .cache/seaweedfs/ (~4.5 min)
#   scripts/services/seaweedfs.sh start DIR PORT   serve S3 on 127.0.0.1:PORT, data in DIR
#   scripts/services/seaweedfs.sh stop DIR         stop the server started with DIR
#   scripts/services/seaweedfs.sh run DIR PORT     the same server in the foreground (a container's
#                                                  command: docker-compose.yml's `s3`; binds
#                                                  SEAWEEDFS_BIND, default 127.0.0.1)
#
# The binary is built from SeaweedFS's Go module at a pinned version through the Go module proxy:
# `go install ...@version` refuses it (its go.mod has replace directives), so the module is
# downloaded, copied to a writable directory and built there. Never committed (.cache/ is ignored).
# Credentials: the S3 identity is taken from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (written to
# DIR/s3.json, outside the repository); without them the server would accept anonymous requests,
# so `start` refuses.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VERSION="${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
CACHE="$ROOT/.cache/seaweedfs"
WEED="$CACHE/weed-$VERSION"
# shellcheck source=daemons.sh
source "$(dirname "$0")/daemons.sh"

build() {
  if [[ -x "$WEED" ]]; then echo "$WEED"; return; fi
  command -v go >/dev/null || { echo "seaweedfs: the Go toolchain is required to build weed" >&2; exit 1; }
  mkdir -p "$CACHE"
  local src dir
  src="$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src" ]] || { echo "seaweedfs: go mod download gave no directory" >&2; exit 1; }
  dir="$(mktemp -d "$CACHE/build.XXXXXX")"
  # The build directory goes whatever happens; not with a RETURN trap: bash keeps one set in a
  # function for every later return, and `start`'s, whose own `dir` is the data, then deleted it.
  local built=0
  cp -r "$src/." "$dir/" && chmod -R u+w "$dir" \
    && echo "seaweedfs: building weed $VERSION (once, ~4.5 min on 2 cores)" >&2 \
    && (cd "$dir" && GOFLAGS=-buildvcs=false go build -o "$WEED.partial" ./weed) && built=1
  chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"
  (( built )) || { echo "seaweedfs: building weed failed" >&2; exit 1; }
  mv "$WEED.partial" "$WEED"   # whole or not at all
  echo "$WEED"
}

start() {
  local dir="$1" port="$2" foreground="${3:-}"
  : "${AWS_ACCESS_KEY_ID:?set AWS_ACCESS_KEY_ID (the S3 identity the server accepts)}"
  : "${AWS_SECRET_ACCESS_KEY:?set AWS_SECRET_ACCESS_KEY}"
  build >/dev/null
  mkdir -p "$dir/data"
  umask 077
  cat > "$dir/s3.json" <<JSON
{"identities": [{"name": "replay", "credentials": [{"accessKey": "$AWS_ACCESS_KEY_ID",
  "secretKey": "$AWS_SECRET_ACCESS_KEY"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  local master=9333 volume=18080 filer=8888 s3grpc=18333
  if [[ -z "$foreground" ]]; then
    # Free ports for the master, volume and filer and S3's gRPC (the S3 port is the caller's);
    # the first three's gRPC ports are theirs + 10000, so they are taken from 20000-39999.
    local ports
    ports=($(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1] % 20000 + 20000) for s in socks))
PY
))
    master=${ports[0]} volume=${ports[1]} filer=${ports[2]} s3grpc=${ports[3]}
  fi
  local args=(server -ip=127.0.0.1 -ip.bind="${SEAWEEDFS_BIND:-127.0.0.1}" -dir="$dir/data"
    -master.port="$master" -volume.port="$volume" -filer.port="$filer"
    -master.volumeSizeLimitMB=64 -volume.max=0 -s3 -s3.port="$port" -s3.port.grpc="$s3grpc" -s3.config="$dir/s3.json"
    -s3.port.iceberg=0 -s3.port.lance=0)  # no catalogs: only S3, only on the given port
  if [[ -n "$foreground" ]]; then exec "$WEED" "${args[@]}"; fi
  setsid "$WEED" "${args[@]}" >"$dir/weed.log" 2>&1 < /dev/null &
  echo $! > "$dir/weed.pid"
  local deadline=$((SECONDS + 90))
  until curl -s -o /dev/null "http://127.0.0.1:$port/"; do
    if (( SECONDS > deadline )) || ! kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null; then
      echo "seaweedfs: S3 did not come up on 127.0.0.1:$port" >&2; tail -30 "$dir/weed.log" >&2; stop "$dir"; exit 1
    fi
    sleep 1
  done
  echo "seaweedfs: S3 on http://127.0.0.1:$port (pid $(cat "$dir/weed.pid"), data $dir/data)"
}

stop() {
  stop_daemon "$1/weed.pid" 10
}

case "${1:-}" in
  build) build ;;
  start) start "$2" "$3" ;;
  run) start "$2" "$3" foreground ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 build | start DIR PORT | run DIR PORT | stop DIR" >&2; exit 2 ;;
esac
