# dumpcat server image: serves the catalog in /catalog over the PostgreSQL protocol on port 5433
# and keeps it current from the dump tree mounted at /dumps.
#
#   docker build -t dumpcat .
#   docker run -d -v /data/dumps:/dumps:ro -v /data/cat:/catalog -p 5433:5433 \
#       -e DUMPCAT_USER=analyst -e DUMPCAT_PASSWORD=secret dumpcat
#
# Optional: DUMPCAT_TLS_CERT / DUMPCAT_TLS_KEY (paths inside the container, e.g. on a third volume).
# Build stage: compile dumpcat's optional C kernel (ingest/statistics/_fused_stats.c, fused statistics) into a
# wheel, so that the final image needs no compiler.
FROM python:3.11-slim AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY catalog ./catalog
COPY ingest ./ingest
COPY sql ./sql
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /wheels /wheels
# The import fails the build if the wheel came out without the C kernel.
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && python -c "from ingest.statistics import _fused_stats, kernel; print(kernel.stats_backend())"

WORKDIR /
ENV DUMPCAT_USER="" \
    DUMPCAT_PASSWORD="" \
    DUMPCAT_TLS_CERT="" \
    DUMPCAT_TLS_KEY=""
EXPOSE 5433
VOLUME ["/dumps", "/catalog"]

# sh -c only to turn the optional environment variables into flags; exec hands PID 1 to dumpcat,
# so `docker stop` (SIGTERM) reaches it directly.
ENTRYPOINT ["/bin/sh", "-c", "exec dumpcat serve /catalog --host 0.0.0.0 --port 5433 --watch /dumps ${DUMPCAT_USER:+--user \"$DUMPCAT_USER\"} ${DUMPCAT_PASSWORD:+--password \"$DUMPCAT_PASSWORD\"} ${DUMPCAT_TLS_CERT:+--tls-cert \"$DUMPCAT_TLS_CERT\"} ${DUMPCAT_TLS_KEY:+--tls-key \"$DUMPCAT_TLS_KEY\"} \"$@\"", "dumpcat"]
