# syntax=docker/dockerfile:1
#
# rollstore: one static Go binary on distroless/static (CA certificates for
# TLS to Azure, tzdata, and the nonroot user 65532), nothing else.
#   docker build -t rollstore:dev \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
# (.git is not in the build context, so the version comes in as arguments;
# without them the image reports "devel".)
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 .
# (the builder cross-compiles; no emulation needed).
# deploy/k8s/dockerfile_test.go checks this file; keep them in step.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Build with the image's Go 1.26.x; never download another toolchain.
ENV GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# What `rollstore version` and rollstore_build_info report.
ARG VERSION=devel
ARG REVISION=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X github.com/rollstore/rollstore/internal/version.version=${VERSION} -X github.com/rollstore/rollstore/internal/version.revision=${REVISION}" -o /out/rollstore ./cmd/rollstore

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rollstore /rollstore
# Same uid/gid as runAsUser/runAsGroup in deploy/k8s.
USER 65532:65532
# The API, and the metrics listener the manifests turn on (--metrics-listen).
EXPOSE 8080 9090
ENTRYPOINT ["/rollstore"]
CMD ["serve"]
