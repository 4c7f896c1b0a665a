# The calleval image: `calleval` and `callevalctl` on PATH, their runtime libraries and data
# (the PocketSphinx model, eSpeak NG's voices, CA certificates), bubblewrap and python3 for the
# code sandbox. Runs as UID/GID 10001, the user the k8s/ manifests set.
#   docker build -t calleval:latest .
#   docker run --rm -p 8080:8080 -v calleval-data:/data calleval:latest
# (k8s/README.md: loading the image into a cluster.)

# Build: the packages scripts/setup installs (the same list `scripts/test` builds with), then the
# two programs in Release.
FROM debian:12 AS build
WORKDIR /src
# The package list and the npm locks first (scripts/setup runs npm ci in edge/dashboard and in
# every tools/ dir with a lock), so a source change does not reinstall them.
COPY scripts/setup scripts/setup
COPY edge/dashboard/package.json edge/dashboard/package-lock.json edge/dashboard/
COPY tools/openapi/package.json tools/openapi/package-lock.json tools/openapi/
COPY tools/s3/package.json tools/s3/package-lock.json tools/s3/
COPY tools/k8s/package.json tools/k8s/package-lock.json tools/k8s/
COPY tools/carrier-sdks/package.json tools/carrier-sdks/package-lock.json tools/carrier-sdks/
COPY tools/livekit-sdk/package.json tools/livekit-sdk/package-lock.json tools/livekit-sdk/
COPY tools/retell/package.json tools/retell/package-lock.json tools/retell/
RUN apt-get update -qq && scripts/setup && rm -rf /var/lib/apt/lists/*
COPY . .
RUN BUILD_DIR=/src/build scripts/build calleval callevalctl \
 && strip --strip-unneeded build/cmd/calleval/calleval build/cmd/callevalctl/callevalctl

# Runtime: the shared libraries the two programs link (readelf -d ... | grep NEEDED) and the
# files they read at run time; nothing else. Keep in step with scripts/setup.
FROM debian:12-slim
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates tzdata \
      libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 \
      libcurl4 libssl3 libsqlite3-0 libpq5 libphonenumber8 libicu72 \
      libavformat59 libavcodec59 libavutil57 libswresample4 \
      libpocketsphinx3 libsphinxbase3 pocketsphinx-en-us \
      libespeak-ng1 espeak-ng-data \
      libgstreamer1.0-0 libgstreamer-plugins-base1.0-0 libgstreamer-plugins-bad1.0-0 \
      gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-nice \
      bubblewrap python3 \
 && rm -rf /var/lib/apt/lists/*
# Read at run time: /usr/share/pocketsphinx/model/en-us (embedded speech-to-text),
# /usr/lib/x86_64-linux-gnu/espeak-ng-data (embedded text-to-speech), /usr/bin/bwrap and
# /usr/bin/python3 (--sandbox-bwrap, --sandbox-python), /etc/ssl/certs (outbound HTTPS, wss://),
# the GStreamer plugins under /usr/lib/x86_64-linux-gnu/gstreamer-1.0 (WebRTC for room runs).
# The OpenAPI document is compiled into the binary; the edge serves no files but recordings.
RUN groupadd --gid 10001 calleval \
 && useradd --uid 10001 --gid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin calleval \
 && mkdir -p /data && chown 10001:10001 /data
COPY --from=build /src/build/cmd/calleval/calleval /src/build/cmd/callevalctl/callevalctl /usr/local/bin/
USER 10001:10001
WORKDIR /data
# Every role on SQLite in /data, listening on all interfaces (flags and k8s/ override these).
ENV CALLEVAL_DATA_DIR=/data \
    CALLEVAL_HTTP_ADDR=0.0.0.0:8080 \
    CALLEVAL_GRPC_ADDR=0.0.0.0:50051
EXPOSE 8080 50051
ENTRYPOINT ["calleval"]
CMD ["serve"]
