# The isolated pool's image on the local Debian base (`build-local --browser`):
# deploy/Dockerfile's `browser` stage with Debian's chromium, the host's
# release binary and the detector's model (as in trawl.Dockerfile), UID 65532,
# TRAWL_CHROMIUM, HOME=/tmp.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
COPY trawl /usr/local/bin/trawl
COPY e5-small-q4.bin tokenizer.json SHA256SUMS /usr/local/share/trawl/models/multilingual-e5-small/
ENV TRAWL_CHROMIUM=/usr/bin/chromium \
    TRAWL_MODELS_DIR=/usr/local/share/trawl/models \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
EXPOSE 9090
ENTRYPOINT ["trawl"]
CMD ["worker"]
