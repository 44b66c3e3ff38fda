"""Pin torch's CPU floating-point code paths, so that CPU runs differ less between processors (not always: see below).

torch chooses its CPU kernels when it loads. ATen's own vectorised kernels (softmax, log-softmax, attention, the
cross-entropy) use the widest instruction set the processor has, AVX-512 or AVX2, and MKL (matrix products, `exp`)
picks a code path per processor model and vendor. Another vector width or kernel sums in another order, so two CPUs
round differently in the last bits, and RL on a small model amplifies that into other accuracies. Two variables,
read once when torch loads, fix both choices:

- `ATEN_CPU_CAPABILITY=avx2`: ATen's AVX2 kernels, the same machine code on every x86-64 CPU with AVX2;
- `MKL_CBWR=COMPATIBLE`: MKL's conditional numerical reproducibility on its one code branch that MKL's documentation
  promises alike on Intel and non-Intel processors (its `AVX2` branch exists on Intel processors only: elsewhere MKL
  falls back to its own dispatch).

`MKL_ENABLE_INSTRUCTIONS` and `ONEDNN_MAX_CPU_ISA` are not needed: the first has no effect once `MKL_CBWR` fixes
the branch (and none on non-Intel processors), and the float32 work of the demo and the studies never reaches oneDNN.

The demo (`examples/train_qwen.py` without `--model_name_or_path`), `examples/evaluate.py` on the demo's model or
task, and the studies under `benchmarks/` call `pin_cpu_numerics()` before they import torch; the library itself
never does, so a user's own run keeps torch's defaults. `COBA_PIN_NUMERICS=0` turns the pinning off, and a variable
the user has set is left as it is. docs/numerics.md gives the speed cost, what "the same digits" covers, and where
the same digits were not reached (an AMD EPYC gave other demo digits than the Intel Xeon with the pinning on).

This module does not import torch, so that it can run before torch loads.
"""

from __future__ import annotations

import os
import sys

SWITCH = "COBA_PIN_NUMERICS"
PINNED_VARIABLES: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}


def pinning_enabled() -> bool:
    """False when the environment sets `COBA_PIN_NUMERICS=0`, True when it is unset or `1`."""
    value = os.environ.get(SWITCH, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{SWITCH}={value!r}: set it to 1 (pin torch's CPU code paths, the default) or 0 (do not).")
    return value == "1"


def pin_cpu_numerics() -> dict[str, str]:
    """Set each of `PINNED_VARIABLES` that the environment does not set yet; returns the variables it set.

    Returns an empty dict when `COBA_PIN_NUMERICS=0`. Raises `RuntimeError` when torch is already imported, since
    torch reads these variables only when it loads: call it at the top of a script, before anything imports torch
    (transformers, trl, accelerate and datasets do). Processes the script starts inherit the variables.
    """
    if not pinning_enabled():
        return {}
    if "torch" in sys.modules:
        raise RuntimeError(
            "pin_cpu_numerics() must run before torch is imported (torch reads ATEN_CPU_CAPABILITY and MKL_CBWR when "
            "it loads): call it at the top of the script, before importing torch, transformers or trl."
        )
    pinned = {name: value for name, value in PINNED_VARIABLES.items() if name not in os.environ}
    os.environ.update(pinned)
    return pinned


def numerics_setting() -> dict[str, str | None]:
    """The numerics in effect in this process: each pinned variable's value (None: unset), the switch, and torch's
    CPU capability (`torch.backends.cpu.get_cpu_capability()`) when torch is loaded, without importing it."""
    setting: dict[str, str | None] = {name: os.environ.get(name) for name in PINNED_VARIABLES}
    setting[SWITCH] = os.environ.get(SWITCH)
    torch = sys.modules.get("torch")
    setting["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability() if torch is not None else None
    return setting
