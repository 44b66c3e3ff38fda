"""Pinned CPU numerics (`coba_trl.numerics`): the demo gives the same digits whatever the CPU's vector width."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coba_trl import numerics

ROOT = Path(__file__).resolve().parents[1]


CPU_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "NPY_DISABLE_CPU_FEATURES",
    numerics.SWITCH,
)
SHORT_DEMO = [  # the demo's model and task, a shorter warm start and the first two generation rounds
    "--max_steps", "4",
    "--demo_warm_start_steps", "40",
    "--demo_num_heldout", "40",
    "--demo_num_train_prompts", "64",
    "--per_device_train_batch_size", "32",
    "--demo_eval_steps", "2",
    "--disable_tqdm", "true",
]  # fmt: skip
LOGGED = ("loss", "reward", "entropy", "grad_norm", "heldout_accuracy")


def avx2_machine() -> dict[str, str]:
    """What a processor without AVX-512 changes, set as its hardware would: ATen's kernels are the AVX2 build (torch
    takes the lower of this variable and what the processor has), MKL and oneDNN cap their dispatch at AVX2, and numpy
    does without its AVX-512 loops."""
    found = np.show_config(mode="dicts")["SIMD Extensions"]["found"]
    avx512 = [name for name in found if name.startswith("AVX512") or name == "X86_V4"]
    machine = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    return {**machine, "NPY_DISABLE_CPU_FEATURES": " ".join(avx512)} if avx512 else machine


@pytest.fixture
def clean_environment(monkeypatch):
    """No pinned variable and no switch set, and torch not loaded as far as `pin_cpu_numerics` can tell."""
    for name in CPU_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_pin_sets_what_the_user_left_unset(clean_environment, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert numerics.pin_cpu_numerics() == {"MKL_CBWR": "COMPATIBLE"}
    assert os.environ["ATEN_CPU_CAPABILITY"] == "default" and os.environ["MKL_CBWR"] == "COMPATIBLE"
    assert numerics.numerics_setting() == {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        numerics.SWITCH: None,
        "torch_cpu_capability": None,
    }


def test_switch_turns_pinning_off(clean_environment, monkeypatch):
    monkeypatch.setenv(numerics.SWITCH, "0")
    assert numerics.pin_cpu_numerics() == {}
    assert not any(name in os.environ for name in numerics.PINNED_VARIABLES)
    monkeypatch.setenv(numerics.SWITCH, "off")
    with pytest.raises(ValueError, match="COBA_PIN_NUMERICS='off'"):
        numerics.pin_cpu_numerics()


def test_pin_after_torch_loaded_is_an_error(clean_environment, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", object())
    with pytest.raises(RuntimeError, match="before torch is imported"):
        numerics.pin_cpu_numerics()
    assert "MKL_CBWR" not in os.environ


def test_module_loads_without_torch():
    code = "import sys, coba_trl.numerics; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def run_short_demo(output_dir: Path, **variables: str) -> subprocess.Popen:
    env = {name: value for name, value in os.environ.items() if name not in CPU_VARIABLES}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **variables)
    command = [sys.executable, "examples/train_qwen.py", *SHORT_DEMO, "--output_dir", str(output_dir)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def demo_numbers(output_dir: Path) -> dict:
    """Held-out accuracy before and after RL, each logged step's numbers, and the trained weights' bytes."""
    summary = json.loads((output_dir / "demo_summary.json").read_text())
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {
        "accuracy": (summary["accuracy_before"], summary["accuracy_after"]),
        "steps": [[record["step"], *(record.get(key) for key in LOGGED)] for record in history],
        "weights": (output_dir / "model.safetensors").read_bytes(),
    }


@pytest.mark.slow
def test_demo_gives_the_same_digits_on_avx2_and_avx512(tmp_path):
    """The demo's warm start and first RL steps, pinned, on this processor as it is and on an emulated AVX2 one.

    The AVX-512 machine is this processor with torch's defaults, which the demo pins. The AVX2 machine is emulated
    by what its hardware would change and the pinning does not: ATen's capability at avx2 (torch takes the lower of
    this variable and the processor's; the pinning finds it set and keeps it, with the value it would have set), MKL
    and oneDNN capped at AVX2 by their own instruction limits (not MKL's reproducibility branch, which the pinning
    sets) and numpy without its AVX-512 loops. A third run, this processor with pinning off, must differ: otherwise the
    first two could agree for want of any difference to remove. Processors of
    another vendor cannot be emulated here; there the pinning relies on MKL's COMPATIBLE branch (docs/numerics.md).
    """
    runs = {
        "avx512": run_short_demo(tmp_path / "avx512"),
        "avx2": run_short_demo(tmp_path / "avx2", **avx2_machine()),
        "unpinned": run_short_demo(tmp_path / "unpinned", **{numerics.SWITCH: "0"}),
    }
    for name, process in runs.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"{name}: {output[-3000:]}"
    pinned = demo_numbers(tmp_path / "avx512")
    assert max(step for step, *_ in pinned["steps"]) == 4
    assert demo_numbers(tmp_path / "avx2") == pinned
    assert demo_numbers(tmp_path / "unpinned")["weights"] != pinned["weights"]
