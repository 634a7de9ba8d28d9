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
    LLMMETER_HOST=0.0.0.0 \
    LLMMETER_PORT=8080 \
    LLMMETER_DB=sqlite:////data/llmmeter.db \
    XDG_CACHE_HOME=/data/cache
RUN groupadd --system --gid 10001 llmmeter \
    && useradd --system --uid 10001 --gid llmmeter --no-create-home --home-dir /nonexistent llmmeter \
    && mkdir /data \
    && chown llmmeter:llmmeter /data
COPY --from=build /opt/llmmeter /opt/llmmeter
# A config mounted at /app/llmmeter.toml is read as ./llmmeter.toml.
WORKDIR /app
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8080
# Ready means the ledger is writable and the price tables are loaded (/readyz).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('LLMMETER_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["llmmeter"]
CMD ["serve"]
