"""TensorZero's gateway as a local HTTP server, for bench/relay.py: the Rust gateway the
`tensorzero` wheel carries, started offline (no ClickHouse, no PostgreSQL, no Valkey) with
a config file, the way the wheel's own `patch_openai_client` starts it. Runs under
bench/.venv-tensorzero's Python (`make bench-peers`); writes the gateway's OpenAI-compatible
base URL (http://127.0.0.1:PORT/openai/v1, the port the gateway picked) to URL_FILE and
serves until terminated. Benchmark use only.

    bench/.venv-tensorzero/bin/python bench/tensorzero_gateway.py CONFIG.toml URL_FILE
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import tensorzero


def main() -> None:
    config, url_file = sys.argv[1], Path(sys.argv[2])
    # The wheel's only way to run its HTTP gateway (the standalone binary ships in a container image).
    gateway = tensorzero._start_http_gateway(config_file=config, clickhouse_url=None, postgres_url=None,
                                             valkey_url=None, async_setup=False)
    tmp = url_file.with_suffix(".tmp")
    tmp.write_text(gateway.base_url)
    tmp.rename(url_file)  # whole or absent: the bench polls for it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
