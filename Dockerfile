# syntax=docker/dockerfile:1
# The mimeo controller image: `docker build -t ghcr.io/mimeo-dev/mimeo:0.1.0 .` from the
# repository root. The chart (charts/mimeo) runs it as user 65532 with a read-only root file system.

# Build stage: the Rust toolchain on Debian 12 (bookworm), so the binary links against the same
# glibc as the runtime stage below. The version matches the toolchain the repository is built and
# tested with; Cargo.lock pins every dependency (--locked).
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and build directory between builds (BuildKit); the binary is
# copied out of the cached target directory, which is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin mimeo \
    && install -m 0755 target/release/mimeo /usr/local/bin/mimeo

# Runtime stage. mimeo uses rustls (no OpenSSL), but it is not a static binary: it links glibc
# (libc, libm) and libgcc_s. distroless/cc has exactly those and nothing else (no shell, no package
# manager); distroless/static would lack them. The :nonroot tag runs as user 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/mimeo /usr/local/bin/mimeo
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mimeo"]
CMD ["run"]
