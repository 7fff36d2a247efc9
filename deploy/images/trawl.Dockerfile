# The trawl image on the local Debian base (deploy/images/build-local): the
# binary `cargo build --release` made on the host, with the same contract as
# deploy/Dockerfile's runtime stage: /usr/local/bin/trawl, UID 65532, the role
# as the argument, meant to run with a read-only root and /tmp as its one
# writable folder. It needs no shell: compose's health checks run `trawl probe`.
# The tool guard's detector model comes as build-local installed it (`trawl
# models install`), at the same place as in deploy/Dockerfile.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
COPY trawl /usr/local/bin/trawl
COPY e5-small-q4.bin tokenizer.json SHA256SUMS /usr/local/share/trawl/models/multilingual-e5-small/
ENV TRAWL_MODELS_DIR=/usr/local/share/trawl/models
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 9090
ENTRYPOINT ["trawl"]
CMD ["--help"]
