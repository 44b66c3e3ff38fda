"""What a study's records say about where and from what they ran: the machine, the code's commit and the CPU
numerics settings (the same seed gives other digits on another CPU)."""

from __future__ import annotations

import os
import platform
import subprocess


def machine_record() -> dict:
    """CPU model, core count, torch threads and load average: the same seed gives other digits on other CPUs."""
    import torch

    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line), "")
    except OSError:
        model = ""
    return {
        "cpu_model": model or platform.processor(),
        "nproc": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def provenance() -> dict:
    """The code's commit (and whether its tracked files differ from it) and the CPU numerics settings in force."""
    import coba_trl
    from coba_trl.numerics import numerics_setting

    package = os.path.dirname(os.path.abspath(coba_trl.__file__))

    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", package, *args], capture_output=True, text=True, check=False)
        return result.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "tracked_files_modified": bool(git("status", "--porcelain", "--untracked-files=no")),
        "coba_trl": package,
        "numerics": numerics_setting(),
    }
