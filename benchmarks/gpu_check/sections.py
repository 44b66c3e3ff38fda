"""The in-process sections of the GPU check (`check.py`): correctness and LoRA (speed: `speed.py`).

Each section takes `put(key, value)`, which adds a figure to the report and writes it to disk at once, and calls it
as soon as a part is done (each correctness check, each speed round), so a run cut short keeps what it had.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable

import numpy as np
import torch

from gpu_check.trainers import FP32_CHECK, Sizes, logged, make_trainer, prompt_dataset, run_arm

TOLERANCE = 1e-5
Put = Callable[[str, object], None]


class Parts:
    """The independent parts of a section (the speed arms, the two correctness checks): one that raises has its
    traceback appended to the section's log and the others still run; `raise_if_any` then fails the section."""

    def __init__(self, log_path: str):
        self.log_path, self.errors = log_path, {}

    def run(self, name: str, part: Callable, *args, **kwargs):
        """`part(*args, **kwargs)`, or None if it raised."""
        try:
            return part(*args, **kwargs)
        except Exception as error:
            with open(self.log_path, "a") as log:
                log.write(f"{name}:\n")
                traceback.print_exc(file=log)
            traceback.print_exc()
            self.errors[name] = f"{type(error).__name__}: {error}"
            return None

    def raise_if_any(self) -> None:
        if self.errors:
            raise RuntimeError("; ".join(f"{name}: {error}" for name, error in self.errors.items()))


def max_difference(ours: list, theirs: list) -> float:
    """Largest |a - b| over paired arrays; infinity when their number or shapes differ."""
    if len(ours) != len(theirs) or any(np.shape(a) != np.shape(b) for a, b in zip(ours, theirs, strict=True)):
        return float("inf")
    differences = [np.max(np.abs(np.subtract(a, b)), initial=0.0) for a, b in zip(ours, theirs, strict=True)]
    return float(max(differences, default=0.0))


def reference_advantages(prompts: list[str], rewards: list[float]) -> np.ndarray:
    """(r - group mean) / (Bessel group std + 1e-4) over each prompt's rows; a group of one gets 0 (TRL's GRPO
    advantage, which CoBA applies to groups of any size)."""
    rewards, prompts = np.asarray(rewards, dtype=np.float64), np.asarray(prompts)
    advantages = np.zeros_like(rewards)
    for prompt in set(prompts.tolist()):
        rows = prompts == prompt
        if rows.sum() > 1:
            advantages[rows] = (rewards[rows] - rewards[rows].mean()) / (rewards[rows].std(ddof=1) + 1e-4)
    return advantages


def check_correctness(device: torch.device, output_dir: str, put: Put, log_path: str) -> None:
    """fp32, eager attention, deterministic algorithms: uniform CoBA equals GRPO step for step (rewards, advantages,
    loss, grad_norm); a scripted uneven allocation reaches the reward function and gets numpy's advantages. The two
    checks run even if the other fails."""
    common = dict(
        dtype=torch.float32,
        attention="eager",
        dataset=prompt_dataset(16, np.full(16, 0.5)),
        bf16=False,
        learning_rate=1e-3,
        generation_kwargs=None,
        seed=7,
    )
    parts = Parts(log_path)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for name, check in (("uniform_equals_grpo", uniform_against_grpo), ("scripted_allocation", scripted)):
            result = parts.run(name, check, device, output_dir, common)
            if result is not None:
                put(name, result)
    finally:
        torch.use_deterministic_algorithms(False)
    parts.raise_if_any()


def uniform_against_grpo(device: torch.device, output_dir: str, common: dict) -> dict:
    runs = {}
    for arm in ("grpo", "uniform"):
        trainer, reward = make_trainer(arm, FP32_CHECK, device, output_dir, steps=3, **common)
        trainer.train()
        runs[arm] = {
            "rewards": [call[1] for call in reward.calls],
            "advantages": trainer.probe["advantages"],
            "loss": logged(trainer, "loss"),
            "grad_norm": logged(trainer, "grad_norm"),
        }
    return equivalence(runs["grpo"], runs["uniform"])


def scripted(device: torch.device, output_dir: str, common: dict) -> dict:
    scripted_sizes = [[1, 9, 5, 1], [2, 2, 7, 5]]
    trainer, reward = make_trainer("coba", FP32_CHECK, device, output_dir, steps=2, min_generations=1, **common)
    sizes = iter(scripted_sizes)
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.train()
    expected, observed = [sorted(s) for s in scripted_sizes], [sorted(Counter(c[0]).values()) for c in reward.calls]
    error = max_difference([reference_advantages(*call[:2]) for call in reward.calls], trainer.probe["advantages"])
    print(f"[correctness] scripted groups {observed} (expected {expected}), advantages vs numpy {error:.1e}")
    return {
        "expected_group_sizes": expected,
        "observed_group_sizes": observed,
        "advantages_vs_numpy": error,
        "passed": observed == expected and error <= TOLERANCE,
    }


def equivalence(grpo: dict, uniform: dict) -> dict:
    """Max |difference| per quantity; grad_norm relative to GRPO's largest, and it must be non-zero (a zero gradient
    would compare nothing)."""
    result = {name: max_difference(grpo[name], uniform[name]) for name in ("rewards", "advantages", "loss")}
    scale = max(grpo["grad_norm"], default=0.0)
    result["grad_norm"] = max_difference(grpo["grad_norm"], uniform["grad_norm"]) / max(scale, 1e-12)
    result["grad_norm_grpo"] = grpo["grad_norm"]
    result["rounds"] = len(grpo["rewards"])
    result["passed"] = (
        result["rounds"] == 3
        and scale > 0
        and all(result[name] <= TOLERANCE for name in ("rewards", "advantages", "loss", "grad_norm"))
    )
    figures = ", ".join(f"{name} {result[name]:.1e}" for name in ("rewards", "advantages", "loss", "grad_norm"))
    print(
        f"[correctness] uniform vs GRPO, {result['rounds']} rounds, max |difference|: {figures} (grad_norm relative)"
    )
    return result


def check_lora(sizes: Sizes, device: torch.device, output_dir: str, put: Put) -> None:
    """One small CoBA round with a LoRA adapter (r 16 on the attention projections)."""
    from peft import LoraConfig

    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    result = run_arm("coba", sizes, device, output_dir, rounds=1, small=True, peft_config=lora)
    result["passed"] = bool(np.isfinite(result["loss"]).all()) and result["trainable_parameters"] > 0
    print(f"[lora] {result['trainable_parameters']:,} trainable parameters, {result['round_s']:.2f} s per round")
    for key, value in result.items():
        put(key, value)
