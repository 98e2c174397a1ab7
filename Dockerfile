# syntax=docker/dockerfile:1.7
# certbench service image: the API (`certbench serve`) and the GPU workers (`certbench worker`).
# Python 3.11 + uv, dependencies from uv.lock (PyPI torch wheels bundle the CUDA runtime; the host
# needs only the NVIDIA driver and the container toolkit), runs as an unprivileged user.

FROM python:3.11-slim-bookworm AS build
COPY --from=ghcr.io/astral-sh/uv:0.9 /uv /uvx /bin/
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/venv
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock file changes.
COPY pyproject.toml uv.lock README.md ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-project
COPY . .
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 certbench \
    && useradd --system --uid 10001 --gid certbench --create-home certbench \
    && mkdir -p /data \
    && chown certbench:certbench /data
COPY --from=build --chown=certbench:certbench /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CERTBENCH_DATA_DIR=/data \
    CERTBENCH_HOST=0.0.0.0 \
    CERTBENCH_PORT=8000
USER certbench
WORKDIR /home/certbench
VOLUME ["/data"]
EXPOSE 8000
CMD ["certbench", "serve"]
