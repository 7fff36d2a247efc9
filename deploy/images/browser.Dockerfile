# The isolated pool's image on the local Debian base (`build-local --browser`):
# deploy/Dockerfile's `browser` stage with Debian's chromium, the host's
# release binary, UID 65532, TRAWL_CHROMIUM, HOME=/tmp.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
COPY trawl /usr/local/bin/trawl
ENV TRAWL_CHROMIUM=/usr/bin/chromium \
    HOME=/tmp
USER 65532:65532
WORKDIR /tmp
EXPOSE 9090
ENTRYPOINT ["trawl"]
CMD ["worker"]
