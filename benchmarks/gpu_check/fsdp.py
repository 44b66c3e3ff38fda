"""The FSDP section of the GPU check (`check.py`): two CoBA rounds launched under the FSDP2 recipe.

    accelerate launch --config_file recipes/accelerate/fsdp_8gpu.yaml --num_processes N benchmarks/gpu_check/fsdp.py \
        --device cuda --output OUT/fsdp.json                      # what `check_fsdp` runs (N: 1 on CUDA, 2 on CPU)

The launched processes build the model on the CPU (as the recipe's `fsdp_cpu_ram_efficient_loading` expects) and
train two CoBA rounds; rank 0 writes the result, which counts only if FSDP2 really sharded the model. On CUDA the
recipe runs as it is, over NCCL. accelerate turns the recipe's FSDP settings on only for accelerators (on a CPU it
would train plain data-parallel), so on a CPU `fsdp2_over_gloo` sets up the same FSDP2 plugin, from the variables the
launcher derived from the recipe, over gloo: everything but NCCL and the CUDA device is then exercised without a GPU.

The launch writes all its output to a log file as it comes, with `NCCL_DEBUG=WARN` and Python's fault handler (a
crash in native code prints the Python stack); a process that hangs prints its stacks and exits before the launcher
is stopped, so the log holds the cause.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.state import PartialState
from accelerate.utils import DistributedType

if __name__ == "__main__":  # run as a script: the benchmarks folder, where `gpu_check` is a package, on the path
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from gpu_check.trainers import CPU_SMOKE, QWEN25_05B, plain, run_arm  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "accelerate" / "fsdp_8gpu.yaml"
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b.*)$")


def launch(command: list[str], log_path: str, timeout: float, env: dict) -> int | None:
    """Run `command`, its output appended to `log_path` as it comes; after `timeout` seconds end it and every process
    it started, the workers torchrun detaches with setsid included: SIGTERM, SIGKILL 10 s later. The exit status, None
    when it timed out."""
    with open(log_path, "a") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            parent = psutil.Process(process.pid)
            tree = [parent, *parent.children(recursive=True)]
            for member in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    member.terminate()
            for member in psutil.wait_procs(tree, timeout=10)[1]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    member.kill()
            process.wait()
            return None


def cause(log_text: str) -> str:
    """The line of a launch's output that says why it failed: the last exception raised in a process (not the
    launcher's own ChildFailedError), else a fault handler's report, else the last NCCL warning, else the last line."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    exceptions = [m.group(1) for m in map(EXCEPTION_LINE.match, lines) if m and "ChildFailedError" not in m.group(1)]
    if exceptions:
        return exceptions[-1]
    for marker in ("Timeout (", "Fatal Python error", "NCCL WARN"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1]
    return lines[-1] if lines else "no output"


def check_fsdp(device, output_dir: str, put, log_path: str, timeout: float) -> None:
    """Launch the FSDP rounds (one process on CUDA, two on CPU), their output in `log_path`; put their result, and
    raise with the cause when the launch fails or times out."""
    result_path = os.path.join(output_dir, "fsdp.json")
    if os.path.exists(result_path):
        os.remove(result_path)
    processes = 1 if device.type == "cuda" else 2
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(RECIPE)]
    command += ["--num_processes", str(processes), "--main_process_port", "0", os.path.abspath(__file__)]
    command += ["--device", device.type, "--output", result_path, "--timeout", str(timeout)]
    env = {**os.environ, "NCCL_DEBUG": "WARN", "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    # the launcher's default is one thread per process, which makes building the model on the CPU slow
    env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // processes)))
    start = time.perf_counter()
    status = launch(command, log_path, timeout, env)
    put("launch", {"command": " ".join(command), "exit": status, "seconds": time.perf_counter() - start})
    if status == 0 and os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
        for key, value in result.items():
            put(key, value)
        print(
            f"[fsdp] {result['distributed_type']} over {result['num_processes']} process(es), sharded over "
            f"{result['sharded_over']}: {result['rounds_measured']} rounds, grad_norm {result['grad_norm']}"
        )
        return
    with open(log_path) as f:
        reason = cause(f.read())
    outcome = f"timed out after {timeout:.0f} s" if status is None else f"exit {status}"
    raise RuntimeError(f"{outcome}: {reason} (the whole output: {log_path})")


def fsdp2_over_gloo() -> None:
    """Switch this process's accelerate state (data-parallel over gloo on a CPU) to FSDP, with the FSDP2 plugin that
    the launcher's FSDP_* variables describe; trainers then use it through `accelerator_config`'s
    `use_configured_state`."""
    state = Accelerator(cpu=True).state
    plugin = FullyShardedDataParallelPlugin()
    plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def fsdp_rounds(device, output_dir: str) -> dict:
    """In each launched process: two small CoBA rounds from a model built on the CPU; passes if the loss and the
    gradient norm are finite and FSDP2 sharded the model over every process."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    overrides = {}
    if device.type == "cpu":
        fsdp2_over_gloo()
        overrides["accelerator_config"] = {"use_configured_state": True}
    sizes = QWEN25_05B if device.type == "cuda" else CPU_SMOKE
    cpu = torch.device("cpu")
    result = run_arm(
        "coba", sizes, device, output_dir, 2, small=True, model_device=cpu, processes=processes, **overrides
    )
    finite = bool(np.isfinite(result["loss"]).all() and np.isfinite(result["grad_norm"]).all())
    result["passed"] = finite and result["fsdp2_sharded"] and result["sharded_over"] == processes
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="The launched side of the GPU check's FSDP section.")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--output", required=True, help="the result's JSON file (written by rank 0)")
    parser.add_argument("--timeout", type=float, required=True, help="the launcher's limit in seconds")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(max(args.timeout - 15, 1), exit=True)  # a hang ends with its stacks in the log
    with tempfile.TemporaryDirectory(prefix="gpu_check_fsdp_") as runs:
        result = fsdp_rounds(torch.device(args.device), runs)
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1, default=plain)
    print(
        f"[fsdp] rank {rank}: {result['distributed_type']} sharded over {result['sharded_over']}, loss {result['loss']}"
    )


if __name__ == "__main__":
    main()
