# The S3-compatible object store of docker-compose.yml (`s3`): SeaweedFS built from the same Go
# module version, by the same script, as `make test-prod` builds it (scripts/services/seaweedfs.sh).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY scripts/services/seaweedfs.sh scripts/services/daemons.sh scripts/services/
RUN scripts/services/seaweedfs.sh build && cp .cache/seaweedfs/weed-* /weed

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/services/seaweedfs.sh scripts/services/daemons.sh scripts/services/
COPY --from=build /weed /tmp/weed
RUN v="$(sed -n 's/^VERSION="${SEAWEEDFS_VERSION:-\(.*\)}"$/\1/p' scripts/services/seaweedfs.sh)" \
    && mkdir -p .cache/seaweedfs && mv /tmp/weed ".cache/seaweedfs/weed-$v"
