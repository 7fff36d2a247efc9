# The trawl image on the local Debian base (deploy/images/build-local): the
# binary `cargo build --release` made on the host, with the same contract as
# deploy/Dockerfile's runtime stage: /usr/local/bin/trawl, UID 65532, the role
# as the argument, meant to run with a read-only root and /tmp as its one
# writable folder. It needs no shell: compose's health checks run `trawl probe`.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
COPY trawl /usr/local/bin/trawl
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["trawl"]
CMD ["--help"]
