# Redis from Debian's packages on the local base, for deploy/compose.local.yaml
# (which passes --protected-mode no: the compose network is its only client).
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
# hadolint ignore=DL3066
USER redis
WORKDIR /var/lib/redis
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
