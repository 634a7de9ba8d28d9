"""`serve --workers N`: uvicorn's supervisor runs N worker processes on one listening socket.

Each worker builds its app from the same flags (handed over in FLAGS_ENV, so no secret is
serialised), writes its own journal segments and runs its own importer into the shared
ledger, and counts its metrics in files under PROMETHEUS_MULTIPROC_DIR: whichever worker
answers /metrics sums every worker's files (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FLAGS_ENV = "LLMMETER_SERVE_FLAGS"
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_HEALTHCHECK_S = 30


def run(config_path: Path | None, flags: Mapping[str, object], workers: int, options: dict[str, Any]) -> None:
    """In the supervising process: start the workers and wait for them."""
    import uvicorn

    own_dir = None
    metrics_dir = os.environ.get(METRICS_DIR_ENV)
    if metrics_dir:
        # Files left by an earlier run would be summed in: the directory must start empty.
        for f in Path(metrics_dir).glob("*.db"):
            f.unlink()
    else:
        own_dir = metrics_dir = tempfile.mkdtemp(prefix="llmmeter-metrics-")
        os.environ[METRICS_DIR_ENV] = metrics_dir
    os.environ[FLAGS_ENV] = json.dumps({
        "config": str(config_path) if config_path is not None else None,
        "flags": {k: str(v) if isinstance(v, Path) else v for k, v in flags.items()},
    })
    try:
        # uvicorn kills a worker that leaves its supervisor's ping unanswered for 5 s, and with it every
        # request in flight (clients see their connections reset, streams cut, usage unseen). A worker
        # on a loaded machine can be that slow without being hung: wait as long as Gunicorn does.
        uvicorn.run("proxy.server.workers:worker_app", factory=True, workers=workers,
                    timeout_worker_healthcheck=WORKER_HEALTHCHECK_S, **options)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)


def worker_app() -> Any:
    """In each worker (uvicorn's factory): the app, from the supervisor's flags."""
    from proxy import settings as config
    from proxy.app import create_app
    from proxy.server.logs import QuietBrokenStreams
    from proxy.server.logs import configure as configure_logs

    handed = json.loads(os.environ[FLAGS_ENV])
    path = Path(handed["config"]) if handed["config"] else None
    flags = dict(handed["flags"])
    if flags.get("prices") is not None:
        flags["prices"] = Path(flags["prices"])
    s = config.resolve_api_keys(config.load(path, overrides=flags))
    logging.getLogger("uvicorn.error").addFilter(QuietBrokenStreams())
    configure_logs()
    app = create_app(s)
    gc.freeze()  # as in a single process (proxy/cli.py)
    return app
