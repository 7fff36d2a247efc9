# In place of Jaeger: the project's OTLP gRPC receiver (tests/examples/otlp_sink.rs)
# on 4317, counting spans per trace id; `docker kill -s USR1` makes it print its
# counts to the container's log.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
COPY otlp_sink /usr/local/bin/otlp-sink
USER 65532:65532
EXPOSE 4317
ENTRYPOINT ["otlp-sink"]
CMD ["--bind", "0.0.0.0", "--port", "4317", "--no-stdin", "--traces"]
