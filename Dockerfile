# syntax=docker/dockerfile:1
# streammom worker image: `docker build -t streammom .` from the repository root.
# Base pinned by tag; pin by digest (python:3.12-slim-bookworm@sha256:...) when publishing.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# ---- builder: a self-contained virtualenv in /opt/venv -------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Metadata first, then the packages: numpy/scipy arrive as manylinux wheels (no compilers).
COPY pyproject.toml README.md ./
COPY streammom/ streammom/
COPY service/ service/
RUN pip install . \
    && streammom --help >/dev/null

# ---- runtime: same slim base, venv only ----------------------------------------------------
# The hot-path kernels (streammom/_compiled.py) are compiled by numba for the host CPU on first
# use (a few seconds at start-up) and cached under NUMBA_CACHE_DIR: /tmp stays writable with a
# read-only root filesystem (an emptyDir in deploy/k8s).
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="streammom" \
      org.opencontainers.image.description="Streaming method-of-moments clustering daemon" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROMETHEUS_DISABLE_CREATED_SERIES=true \
    PATH=/opt/venv/bin:$PATH \
    STREAMMOM_CONFIG=/etc/streammom/streammom.toml \
    STREAMMOM_CHECKPOINT__DIR=/var/lib/streammom \
    STREAMMOM_HTTP__HOST=0.0.0.0 \
    STREAMMOM_HTTP__PORT=9108 \
    NUMBA_CACHE_DIR=/tmp/numba-cache

RUN groupadd --system --gid 10001 streammom \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /var/lib/streammom --shell /usr/sbin/nologin streammom \
    && mkdir -p /var/lib/streammom /etc/streammom \
    && chown 10001:10001 /var/lib/streammom

COPY --from=builder /opt/venv /opt/venv
COPY deploy/streammom.toml /etc/streammom/streammom.toml

USER 10001:10001
WORKDIR /var/lib/streammom
VOLUME ["/var/lib/streammom"]

EXPOSE 9108

HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=2)"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["streammom"]
CMD ["run"]
