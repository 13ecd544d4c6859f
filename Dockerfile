# Manifold in a container: a static gateway binary on an empty base, run as a non-root user.
#
#   docker build -t manifold .
#   docker run -p 8080:8080 -v "$PWD/gateway.yaml:/etc/manifold/config.yaml:ro" manifold
#
# The mounted config must listen on 0.0.0.0:8080 (loopback inside a container is unreachable
# from outside), and the gateway must then be protected: it has no authentication yet, so put
# it behind a network policy or an authenticating proxy. Stdio upstreams run inside the
# container: build an image FROM this one that adds their programs.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN scripts/build /out/gateway "$VERSION"

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/gateway /usr/local/bin/gateway
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/gateway", "health", "-url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve", "-config", "/etc/manifold/config.yaml"]
