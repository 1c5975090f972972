# dumpcat server image: serves the catalog in /catalog over the PostgreSQL protocol on port 5433
# and keeps it current from the dump tree mounted at /dumps. docs/server.md#docker says more.
#
#   docker build -t dumpcat .
#   docker run -d -v /data/dumps:/dumps:ro -v dumpcat-catalog:/catalog -p 5433:5433 \
#       -e DUMPCAT_USER=analyst -v /etc/dumpcat/password:/run/secrets/dumpcat-password:ro \
#       -e DUMPCAT_PASSWORD_FILE=/run/secrets/dumpcat-password dumpcat
#
# The server reads DUMPCAT_USER, DUMPCAT_PASSWORD or DUMPCAT_PASSWORD_FILE, DUMPCAT_TLS_CERT and
# DUMPCAT_TLS_KEY itself, so no secret is ever on a command line. It runs as uid/gid 10001, which
# must be able to write /catalog (a named volume is made so; chown a bind-mounted folder).
#
# Base image: python:3.11-slim (Python 3.11.16, Debian trixie) pinned by the digest of its multi-arch
# index as published on 2026-08-16 (the digest other public projects resolved for the tag on
# 2026-08-18/21; this machine cannot reach a registry to check it). To update it, run
#   docker buildx imagetools inspect python:3.11-slim    (the "Digest:" line)
# and replace the digest on both FROM lines (tests/test_docker.py checks they match and carry one).
# Python dependencies come from constraints.txt, the versions the suite passed on (tests/lock.py).

# Build stage: compile dumpcat's optional C kernels into a wheel, so that the final image needs no
# compiler.
FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7 AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# DL3008 (pin apt versions) ignored: the base digest fixes the Debian release, and its archive keeps
# only the current build of each package, so a pinned version stops installing at its next fix.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md constraints.txt ./
COPY catalog ./catalog
COPY ingest ./ingest
COPY sql ./sql
RUN pip wheel --no-deps --wheel-dir /wheels . && cp constraints.txt /wheels/

FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /wheels /wheels
# The import fails the build if the wheel came out without the C kernels.
RUN pip install --constraint /wheels/constraints.txt /wheels/*.whl && rm -rf /wheels \
    && pip check \
    && python -c "from ingest.formats import _npy_scan; from ingest.statistics import _fused_stats, kernel; print(kernel.stats_backend())"

# A fixed uid/gid, so that a bind-mounted /catalog can be given to it on the host
# (chown 10001:10001); its home holds the user's dumpcat cache (ingest/storage/definitions_cache.py).
RUN groupadd --system --gid 10001 dumpcat \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/dumpcat --create-home \
        --shell /usr/sbin/nologin dumpcat \
    && mkdir -p /catalog /dumps \
    && chown dumpcat:dumpcat /catalog
USER 10001:10001
WORKDIR /home/dumpcat

EXPOSE 5433
VOLUME ["/dumps", "/catalog"]

# A real query over the catalog through a statement worker (catalog/server/healthcheck.py), logging
# in with the server's own DUMPCAT_USER and password (environment or file): the container is healthy
# when clients can be answered, not merely when the port is open.
HEALTHCHECK --interval=30s --timeout=15s --start-period=60s --retries=3 \
    CMD ["dumpcat", "healthcheck", "--host", "127.0.0.1", "--port", "5433"]

# Exec form, no shell: dumpcat is PID 1 and gets `docker stop`'s SIGTERM; `docker run IMAGE --flag`
# appends to this command line.
ENTRYPOINT ["dumpcat", "serve", "/catalog", "--host", "0.0.0.0", "--port", "5433", "--watch", "/dumps"]
