# Kiln service image: kilnd, kiln-worker and the kiln CLI on Debian 12.
#   docker build -t kiln .
#   docker run -p 50051:50051 -p 9464:9464 -v kiln-data:/var/lib/kiln kiln
# The build stage compiles with the same install script and CMake build as CI; the
# runtime stage installs only the shared-library packages the binaries load (listed by
# deploy/runtime-packages.sh) and runs kilnd as an unprivileged user.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bash deploy/build-service.sh /build /out

FROM debian:12 AS runtime
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/kiln --create-home --shell /usr/sbin/nologin kiln
COPY --from=build /out/bin/ /usr/local/bin/
# The kernel library prebuilt for every target preset: compiles for a preset link these
# and generate only the model's glue (other targets compile theirs on first use, cached
# in the data volume).
COPY --from=build /out/lib/kiln/ /usr/local/lib/kiln/
USER 10001:10001
WORKDIR /var/lib/kiln
VOLUME ["/var/lib/kiln"]
# gRPC API and worker protocol; Prometheus /metrics.
EXPOSE 50051 9464
ENTRYPOINT ["kilnd"]
CMD ["--listen", "0.0.0.0:50051", "--data-dir", "/var/lib/kiln", "--metrics-listen", "0.0.0.0:9464"]
