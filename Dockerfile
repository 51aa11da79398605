# maintenance-handler: both static binaries (agent, aggregator) on a distroless, non-root base.
# Multi-platform: the build stage runs on the builder's platform and
# cross-compiles for each target (linux/amd64, and linux/arm64 for Arm
# accelerator VMs such as A4X):
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v1 -t IMAGE --push .
# CI has no container engine; a test builds the same binaries with the same
# flags for both platforms.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/agent ./cmd/aggregator

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="maintenance-handler" \
      org.opencontainers.image.source="https://github.com/maintenance-handler/maintenance-handler" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/ /usr/local/bin/
COPY LICENSE /usr/share/doc/maintenance-handler/LICENSE
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/agent"]
