"""The CPU smoke mode of the one-shot GPU check (`benchmarks/gpu_check.py --device cpu`), so the script never rots."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_every_section(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_check.py"),
        "--device",
        "cpu",
        "--output_dir",
        str(tmp_path),
    ]
    process = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    assert "CoBA / GRPO round_time" in process.stdout
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(report) >= {"environment", "sizes", "correctness", "speed", "lora", "fsdp"}
    assert report["environment"]["versions"]["trl"].startswith("1.16")

    # Uniform CoBA reproduces GRPO exactly on CPU; the scripted uneven groups arrive with numpy's advantages.
    equivalence = report["correctness"]["uniform_equals_grpo"]
    assert (equivalence["rewards"], equivalence["advantages"], equivalence["loss"], equivalence["rounds"]) == (
        0,
        0,
        0,
        3,
    )
    scripted = report["correctness"]["scripted_allocation"]
    assert scripted["observed_group_sizes"] == scripted["expected_group_sizes"] == [[1, 1, 5, 9], [2, 2, 5, 7]]
    assert scripted["advantages_vs_numpy"] <= 1e-5

    # Equal work in every arm (16 completions of exactly 8 tokens), uneven groups only where CoBA allocates.
    arms = report["speed"]["arms"]
    for name, arm in arms.items():
        assert arm["rounds_measured"] == 1 and arm["completion_tokens_per_round"] == 16 * 8, name
        split = arm["generation_s"] + arm["scoring_s"] + arm["training_s"]
        assert arm["round_s"] > 0 and split == pytest.approx(arm["round_s"], rel=1e-6), name
    assert arms["grpo"]["group_size_min"] == arms["uniform"]["group_size_max"] == 4
    assert arms["coba"]["group_size_min"] < 4 < arms["coba"]["group_size_max"]
    assert set(report["speed"]["ratios_coba_over_grpo"]) == {"round_time", "uniform_round_time"}

    lora, full = report["lora"], arms["coba"]
    assert lora["passed"] and 0 < lora["trainable_parameters"] < full["trainable_parameters"]
    # FSDP plumbing: the recipe launched a second process that trained one round (FSDP2 itself needs CUDA).
    fsdp = report["fsdp"]
    assert fsdp["passed"] and fsdp["num_processes"] == 1 and fsdp["rounds_measured"] == 1
