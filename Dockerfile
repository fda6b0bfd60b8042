# The keypool command in a container: keypool serve by default.
#
#   docker build -t keypool .
#   docker run -p 8787:8787 -v keypool-state:/var/lib/keypool \
#     -v "$PWD/keypool.yaml:/etc/keypool/keypool.yaml:ro" \
#     -e KEYPOOL_PROXY_TOKEN -e KEYPOOL_OPERATOR_TOKEN -e GROQ_KEY_1 keypool
#
# The configuration is mounted, never built in: it names its secrets as
# environment variables or files (keypool.example.yaml has every section).
# It listens on 0.0.0.0:8787 so that the published port reaches it, and
# keeps its state in /var/lib/keypool (a relative state, such as the
# default keypool-state, lands there too: it is the working directory).

# The build: the same go build as .ci/run's, a static binary without cgo.
# From a clone, the context's .git lets it stamp the commit and the tag
# that keypool version prints.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /keypool ./cmd/keypool

# The image: distroless's static base holds CA certificates, time zone data
# (for calendar_day's zone) and a nonroot user, and nothing else — no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /keypool /usr/local/bin/keypool
USER nonroot:nonroot
WORKDIR /var/lib/keypool
VOLUME /var/lib/keypool
EXPOSE 8787
# keypool health asks /healthz: 0 for "ok" or "degraded: …", 1 without an answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/keypool", "health", "-url", "http://127.0.0.1:8787", "-timeout", "4s"]
ENTRYPOINT ["/usr/local/bin/keypool"]
CMD ["serve", "-config", "/etc/keypool/keypool.yaml"]
