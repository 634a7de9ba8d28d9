# llmmeter in a container: slim Python, the dependencies exactly as locked, run as a non-root
# user with the ledger (SQLite and its journal) on the /data volume.
FROM python:3.11-slim-bookworm AS build
# The locked dependencies (requirements/runtime.txt: every package pinned, hashes checked) in a
# layer of their own, rebuilt only when the lock changes; the lock is mounted, not copied.
RUN --mount=type=bind,source=requirements/runtime.txt,target=/tmp/runtime.txt \
    python -m venv /opt/llmmeter \
    && /opt/llmmeter/bin/pip install --no-cache-dir --require-hashes -r /tmp/runtime.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY pricing ./pricing
# llmmeter itself: no dependencies of its own choosing, built with the locked setuptools.
RUN /opt/llmmeter/bin/pip install --no-cache-dir --no-deps --no-build-isolation .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/llmmeter/bin:$PATH \
    XDG_CACHE_HOME=/data/cache
# No LLMMETER_HOST/PORT/DB here: environment beats the config file, so a mounted config's
# [server] and [ledger] would be ignored. /app/data points at the volume, so the built-in
# ledger default (sqlite:///data/llmmeter.db, relative) lands there too.
RUN groupadd --system --gid 10001 llmmeter \
    && useradd --system --uid 10001 --gid llmmeter --no-create-home --home-dir /nonexistent llmmeter \
    && mkdir /data /app \
    && chown llmmeter:llmmeter /data \
    && ln -s /data /app/data
COPY --from=build /opt/llmmeter /opt/llmmeter
# The image's defaults (0.0.0.0:8080, the ledger on /data) as a config file at
# /app/llmmeter.toml, read as ./llmmeter.toml: a config mounted there replaces it.
COPY llmmeter.container.toml /app/llmmeter.toml
WORKDIR /app
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8080
# Ready means the ledger is writable and the price tables are loaded (/readyz).
# The probe reads the same config and environment as serve, so it asks the port in force.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-m", "proxy.healthcheck"]
ENTRYPOINT ["llmmeter"]
CMD ["serve"]
