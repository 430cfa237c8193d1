# syntax=docker/dockerfile:1
# Bulkhead's image: one static binary (every role: edge, worker, billing,
# nats, ...) on a base with no shell and no package manager, run as a
# non-root user. deploy/helm's tests parse this file and build the binary
# with the same command (static: no dynamic loader, no libc).
#
#   docker build -t registry.example.com/bulkhead:0.1.0 .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/bulkhead ./cmd/bulkhead

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bulkhead /usr/local/bin/bulkhead
USER 65532:65532
EXPOSE 8787 9464
ENTRYPOINT ["/usr/local/bin/bulkhead"]
