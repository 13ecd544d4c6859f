# Manifold in a container, as two targets:
#
#   docker build -t manifold .                              # minimal: the static gateway alone
#   docker build --target runtimes -t manifold:runtimes .   # with Node.js (npx) and Python (uvx)
#   docker run -p 8080:8080 manifold
#   docker run -p 8080:8080 -v "$PWD/gateway.yaml:/etc/manifold/config.yaml:ro" manifold
#
# Both serve config.container.yaml (listen 0.0.0.0:8080, the demo upstream) unless a config
# is mounted at /etc/manifold/config.yaml; both run as a non-root user. The HEALTHCHECK
# probes the port the config listens on. Most stdio MCP servers are started with npx or uvx:
# they need the "runtimes" target. config.container.yaml has no `auth`: before the gateway is
# reachable beyond a trusted network, mount a config with `auth` (OIDC or API keys).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN scripts/build /out/gateway "$VERSION"

# runtimes: the gateway on Debian with Node.js and npm (npx) and Python with uv (uvx), for
# stdio servers published on the npm registry or PyPI. Their packages are fetched when the
# servers start, into the caches below, which a volume can keep.
FROM node:22-bookworm-slim AS runtimes
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip ca-certificates \
 && python3 -m pip install --no-cache-dir --break-system-packages uv \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY config.container.yaml /etc/manifold/config.yaml
RUN mkdir -p /cache/npm /cache/uv && chown -R 65532:65532 /cache
ENV npm_config_cache=/cache/npm UV_CACHE_DIR=/cache/uv
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/gateway", "health", "-config", "/etc/manifold/config.yaml"]
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve", "-config", "/etc/manifold/config.yaml"]

# minimal (the default target): the static gateway on an empty base.
FROM scratch AS minimal
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY config.container.yaml /etc/manifold/config.yaml
ENV PATH=/usr/local/bin
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/gateway", "health", "-config", "/etc/manifold/config.yaml"]
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve", "-config", "/etc/manifold/config.yaml"]
