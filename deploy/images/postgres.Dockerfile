# Postgres from Debian's packages on the local base, for deploy/compose.local.yaml.
# postgres-entrypoint keeps the official image's contract for the variables
# compose.yaml sets (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB) and its data
# folder, /var/lib/postgresql/data.
ARG BASE=trawl-local/debian:bookworm
FROM ${BASE}
# No cluster at install time: the entrypoint makes one in the data volume.
# hadolint ignore=DL3008
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && printf 'create_main_cluster = false\n' > /etc/postgresql-common/createcluster.d/trawl.conf \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d -o postgres -g postgres -m 2775 /run/postgresql
COPY postgres-entrypoint /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
# The package's user; its UID is whatever adduser gave it.
# hadolint ignore=DL3066
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["postgres-entrypoint"]
