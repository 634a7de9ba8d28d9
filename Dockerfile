# llmmeter in a container: slim Python, installed as a wheel, run as a non-root user with
# the ledger (SQLite and its journal) on the /data volume.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY pricing ./pricing
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LLMMETER_HOST=0.0.0.0 \
    LLMMETER_PORT=8080 \
    LLMMETER_DB=sqlite:////data/llmmeter.db
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent llmmeter \
    && mkdir /data \
    && chown llmmeter:llmmeter /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels
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
