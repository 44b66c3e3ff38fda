"""One-shot GPU check of CoBAGRPOTrainer: correctness on CUDA, speed and memory against GRPOTrainer, LoRA, FSDP2.

    python benchmarks/gpu_check.py --output_dir OUT                 # on a CUDA machine (the device call: docs/gpu.md)
    python benchmarks/gpu_check.py --device cpu --output_dir OUT    # CPU smoke (CI): tiny sizes, the same code paths

Every section is added to OUT/gpu_check.json as soon as it ends; a short table is printed at the end.
1. correctness (fp32, a small Qwen2): `budget_allocator="uniform"` against GRPOTrainer step for step (rewards,
   advantages, loss; max |difference| <= 1e-5), and a scripted uneven allocation (group sizes, numpy advantages).
2. speed: a randomly initialised Qwen2 with Qwen2.5-0.5B's shape in bf16 (sdpa, transformers generation); per round
   64 prompts x mean group 8 = 512 completions of exactly 256 tokens. Arms `uniform`, `coba` (skewed from step 1 by a
   prior pass-rate column) and `grpo`, one warm-up round then `--rounds` rounds each, all in this process: mean
   seconds per round split into generation (`_generate`), scoring (the rest of `_generate_and_score_completions`:
   rewards, advantages, CoBA's allocation) and training (the rest of the round), tokens per second, peak device
   memory above what was allocated before the arm, and the ratios CoBA / GRPO (targets <= 1.05, reported only).
3. lora: one CoBA round with a LoRA adapter on the same model.
4. fsdp: one CoBA round under `accelerate launch --config_file recipes/accelerate/fsdp_8gpu.yaml --num_processes 1`
   (on CPU accelerate runs it as a plain process: the smoke test checks the plumbing, only a GPU checks FSDP2).
The rewards are synthetic: a completion succeeds with its prompt's `pass_rate`, drawn from a hash of its token ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from coba_trl import CoBAConfig, CoBAGRPOTrainer  # noqa: E402
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2  # noqa: E402

FSDP_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "accelerate" / "fsdp_8gpu.yaml"
TOLERANCE = 1e-5
ARMS = ("uniform", "coba", "grpo")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Model shape and round layout of one mode."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int | None  # None: the tokenizer's
    prompts: int  # distinct prompts per round
    group: int  # mean group size G (num_generations)
    completion_tokens: int
    micro_batches: int  # gradient-accumulation steps per round (one optimizer step per round)
    rounds: int  # measured rounds per speed arm, after one warm-up round
    small_prompts: int  # LoRA and FSDP rounds
    small_tokens: int


QWEN25_05B = Sizes(896, 24, 14, 2, 4864, 151_936, 64, 8, 256, 8, rounds=3, small_prompts=16, small_tokens=64)
CPU_SMOKE = Sizes(32, 2, 4, 2, 64, 512, 4, 4, 8, 2, rounds=1, small_prompts=4, small_tokens=8)
FP32_CHECK = Sizes(64, 2, 4, 2, 128, None, 4, 4, 16, 2, rounds=3, small_prompts=4, small_tokens=16)


def clock(device: torch.device) -> float:
    """`time.perf_counter()` after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def prompt_dataset(num_prompts: int, pass_rates: np.ndarray | None = None, seed: int = 0) -> Dataset:
    """Equal-length plain-text prompts with an id and a pass rate: by default a failure-heavy mix (a quarter never
    solved, an eighth always solved, the rest Beta(2, 2)), which a CoBA prior turns into a skewed allocation."""
    if pass_rates is None:
        rng = np.random.default_rng(seed)
        hard, easy = num_prompts // 4, num_prompts // 8
        pass_rates = np.concatenate([np.zeros(hard), np.ones(easy), rng.beta(2.0, 2.0, num_prompts - hard - easy)])
        rng.shuffle(pass_rates)
    prompts = [
        f"Problem {i:05d}. Find the value of the expression and give the final answer:" for i in range(num_prompts)
    ]
    return Dataset.from_dict({"prompt": prompts, "uid": list(range(num_prompts)), "pass_rate": pass_rates.tolist()})


class BernoulliReward:
    """Correctness reward: 1.0 with probability `pass_rate`, drawn from a hash of the completion's token ids, so two
    trainers that generate the same completions score them alike. Records (prompts, rewards, tokens) per call."""

    def __init__(self):
        self.__name__ = "bernoulli_reward"
        self.calls = []

    def __call__(self, prompts, completion_ids, pass_rate, **kwargs):
        draws = [zlib.crc32(np.asarray(ids, dtype=np.int64).tobytes()) / 2**32 for ids in completion_ids]
        rewards = [float(draw < p) for draw, p in zip(draws, pass_rate, strict=True)]
        self.calls.append((list(prompts), rewards, sum(len(ids) for ids in completion_ids)))
        return rewards


def instrumented(trainer_cls: type) -> type:
    """`trainer_cls` recording per generation round the device-synchronised seconds of generation and of the whole
    generate-and-score step, and the advantages it hands to the loss (in `trainer.probe`)."""

    class Instrumented(trainer_cls):
        def __init__(self, *args, **kwargs):
            self.probe = defaultdict(list)
            super().__init__(*args, **kwargs)

        def _generate(self, prompts):
            start = clock(self.accelerator.device)
            result = super()._generate(prompts)
            self.probe["generation_s"].append(clock(self.accelerator.device) - start)
            return result

        def _generate_and_score_completions(self, inputs):
            start = clock(self.accelerator.device)
            output = super()._generate_and_score_completions(inputs)
            self.probe["generate_and_score_s"].append(clock(self.accelerator.device) - start)
            self.probe["advantages"].append(output["advantages"].detach().float().cpu().numpy())
            return output

    Instrumented.__name__ = f"Instrumented{trainer_cls.__name__}"
    return Instrumented


class RoundClock(TrainerCallback):
    """Device-synchronised wall time of every optimizer step (one generation round in this script)."""

    def __init__(self, device: torch.device):
        self.device, self.times, self._last = device, [], None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = clock(self.device)

    def on_step_end(self, args, state, control, **kwargs):
        now = clock(self.device)
        self.times.append(now - self._last)
        self._last = now


def make_trainer(
    arm: str,
    sizes: Sizes,
    device: torch.device,
    output_dir: str,
    steps: int,
    small: bool = False,
    dtype=torch.bfloat16,
    model_device=None,
    dataset=None,
    peft_config=None,
    **overrides,
):
    """A fresh model and an instrumented GRPOTrainer (`grpo`) or CoBAGRPOTrainer (`uniform`; `coba` allocating from
    the prior pass-rate column), one optimizer step per round of `prompts * group` completions; and its reward."""
    prompts, tokens = (sizes.small_prompts, sizes.small_tokens) if small else (sizes.prompts, sizes.completion_tokens)
    tokenizer, reward = build_byte_tokenizer(), BernoulliReward()
    config = {
        "output_dir": output_dir,
        "per_device_train_batch_size": prompts * sizes.group // sizes.micro_batches,
        "gradient_accumulation_steps": sizes.micro_batches,
        "num_generations": sizes.group,
        "max_completion_length": tokens,
        "generation_kwargs": {"min_new_tokens": tokens},  # equal work per rollout in every arm
        "max_steps": steps,
        "use_cpu": device.type == "cpu",
        "report_to": "none",
        "logging_steps": 1,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        **overrides,
    }
    if arm == "grpo":
        trainer_cls, args = GRPOTrainer, GRPOConfig(**config)
    else:
        prior = "pass_rate" if arm == "coba" else None
        args = CoBAConfig(budget_allocator=arm, prompt_id_column="uid", prior_pass_rate_column=prior, **config)
        trainer_cls = CoBAGRPOTrainer
    trainer = instrumented(trainer_cls)(
        qwen2(sizes, tokenizer, model_device or device, dtype),
        reward,
        args=args,
        train_dataset=prompt_dataset(prompts * steps) if dataset is None else dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer, reward


def qwen2(sizes: Sizes, tokenizer, device: torch.device, dtype: torch.dtype):
    """A randomly initialised Qwen2 of `sizes`' shape, built on `device`, with sdpa attention."""
    with torch.device(device):
        model = build_tiny_qwen2(
            tokenizer,
            hidden_size=sizes.hidden_size,
            num_hidden_layers=sizes.num_hidden_layers,
            num_attention_heads=sizes.num_attention_heads,
            num_key_value_heads=sizes.num_key_value_heads,
            intermediate_size=sizes.intermediate_size,
            vocab_size=sizes.vocab_size,
            max_position_embeddings=1024,
        )
    model.set_attn_implementation("sdpa")
    return model.to(dtype)


def free_memory(device: torch.device) -> int:
    """Collect garbage, empty the allocator cache, reset the peak; the bytes still allocated (0 on CPU)."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def max_difference(ours: list, theirs: list) -> float:
    """Largest |a - b| over paired arrays; infinity when their number or shapes differ."""
    if len(ours) != len(theirs) or any(np.shape(a) != np.shape(b) for a, b in zip(ours, theirs, strict=True)):
        return float("inf")
    differences = [np.max(np.abs(np.subtract(a, b)), initial=0.0) for a, b in zip(ours, theirs, strict=True)]
    return float(max(differences, default=0.0))


def reference_advantages(prompts: list[str], rewards: list[float]) -> np.ndarray:
    """(r - group mean) / (Bessel group std + 1e-4) over each prompt's rows; a group of one gets 0 (algorithm.md 7)."""
    rewards, prompts = np.asarray(rewards, dtype=np.float64), np.asarray(prompts)
    advantages = np.zeros_like(rewards)
    for prompt in set(prompts.tolist()):
        rows = prompts == prompt
        if rows.sum() > 1:
            advantages[rows] = (rewards[rows] - rewards[rows].mean()) / (rewards[rows].std(ddof=1) + 1e-4)
    return advantages


def check_correctness(device: torch.device, output_dir: str) -> dict:
    """fp32: uniform CoBA equals GRPO step for step; a scripted uneven allocation gives its groups and advantages."""
    common = dict(
        dtype=torch.float32,
        dataset=prompt_dataset(16, np.full(16, 0.5)),
        bf16=False,
        learning_rate=1e-3,
        generation_kwargs=None,
        seed=7,
    )
    runs = {}
    for arm in ("grpo", "uniform"):
        trainer, reward = make_trainer(arm, FP32_CHECK, device, output_dir, steps=3, **common)
        trainer.train()
        runs[arm] = ([call[1] for call in reward.calls], trainer.probe["advantages"], losses(trainer))
    names = ("rewards", "advantages", "loss")
    equivalence = {name: max_difference(*pair) for name, *pair in zip(names, *runs.values(), strict=True)}
    equivalence["rounds"] = len(runs["grpo"][0])
    equivalence["passed"] = equivalence["rounds"] == 3 and all(equivalence[name] <= TOLERANCE for name in names)

    scripted_sizes = [[1, 9, 5, 1], [2, 2, 7, 5]]
    trainer, reward = make_trainer("coba", FP32_CHECK, device, output_dir, steps=2, min_generations=1, **common)
    sizes = iter(scripted_sizes)
    trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.train()
    expected, observed = [sorted(s) for s in scripted_sizes], [sorted(Counter(c[0]).values()) for c in reward.calls]
    error = max_difference([reference_advantages(*call[:2]) for call in reward.calls], trainer.probe["advantages"])
    scripted = {
        "expected_group_sizes": expected,
        "observed_group_sizes": observed,
        "advantages_vs_numpy": error,
        "passed": observed == expected and error <= TOLERANCE,
    }
    return {"uniform_equals_grpo": equivalence, "scripted_allocation": scripted}


def run_arm(arm: str, sizes: Sizes, device: torch.device, output_dir: str, rounds: int, warmup: int = 0, **kwargs):
    """Train `warmup + rounds` rounds of one arm on a fresh bf16 model: means over the rounds after the warm-up of the
    round time and its split, tokens per second, peak memory, group sizes, and how accelerate ran it."""
    start_memory = free_memory(device)
    trainer, reward = make_trainer(arm, sizes, device, output_dir, steps=warmup + rounds, **kwargs)
    round_clock = RoundClock(device)
    trainer.add_callback(round_clock)
    trainer.train()
    per_round = {
        "round": round_clock.times,
        "generation": trainer.probe["generation_s"],
        "generate_and_score": trainer.probe["generate_and_score_s"],
    }
    total, generation, scored = (np.array(per_round[key][warmup:]) for key in per_round)
    tokens = float(np.mean([call[2] for call in reward.calls[warmup:]]))
    group_sizes = [size for call in reward.calls for size in Counter(call[0]).values()]
    result = {
        "rounds_measured": len(total),
        "round_s": float(np.mean(total)),
        "generation_s": float(np.mean(generation)),
        "scoring_s": float(np.mean(scored - generation)),
        "training_s": float(np.mean(total - scored)),
        "completion_tokens_per_round": tokens,
        "generation_tokens_per_s": tokens / float(np.mean(generation)),
        "round_tokens_per_s": tokens / float(np.mean(total)),
        "group_size_min": min(group_sizes),
        "group_size_max": max(group_sizes),
        "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "loss": losses(trainer),
        "per_round_s": per_round,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "num_processes": trainer.accelerator.num_processes,
        "fsdp2_sharded": any(isinstance(m, FSDPModule) for m in (trainer.model, trainer.model_wrapped)),
    }
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        result.update(
            peak_memory_gib=peak / 2**30,
            peak_above_start_gib=(peak - start_memory) / 2**30,
            peak_reserved_gib=torch.cuda.max_memory_reserved(device) / 2**30,
        )
    return result


def measure_speed(sizes: Sizes, device: torch.device, output_dir: str) -> dict:
    """The three arms in turn on equal rollouts, and the ratios CoBA / GRPO."""
    arms = {}
    for arm in ARMS:
        arms[arm] = run_arm(arm, sizes, device, output_dir, rounds=sizes.rounds, warmup=1)
        print(f"[speed] {arm}: {arms[arm]['round_s']:.2f} s per round", flush=True)
    ratios = {
        "round_time": arms["coba"]["round_s"] / arms["grpo"]["round_s"],
        "uniform_round_time": arms["uniform"]["round_s"] / arms["grpo"]["round_s"],
    }
    if device.type == "cuda":
        ratios["peak_memory"] = arms["coba"]["peak_above_start_gib"] / arms["grpo"]["peak_above_start_gib"]
    return {"arms": arms, "ratios_coba_over_grpo": ratios}


def check_lora(sizes: Sizes, device: torch.device, output_dir: str) -> dict:
    """One small CoBA round with a LoRA adapter (r 16 on the attention projections)."""
    from peft import LoraConfig

    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    result = run_arm("coba", sizes, device, output_dir, rounds=1, small=True, peft_config=lora)
    result["passed"] = bool(np.isfinite(result["loss"]).all()) and result["trainable_parameters"] > 0
    return result


def fsdp_round(sizes: Sizes, device: torch.device, output_dir: str) -> dict:
    """Inside `accelerate launch`: one small CoBA round from a model built on the CPU (as the recipe's
    `fsdp_cpu_ram_efficient_loading` expects); on CUDA it passes only if FSDP2 really sharded the model."""
    result = run_arm("coba", sizes, device, output_dir, rounds=1, small=True, model_device=torch.device("cpu"))
    result["passed"] = bool(np.isfinite(result["loss"]).all()) and (device.type == "cpu" or result["fsdp2_sharded"])
    return result


def check_fsdp(device: torch.device, output_dir: str, timeout: float) -> dict:
    """Run `fsdp_round` under the FSDP2 recipe with one process (`--cpu` on CPU) and read back its result."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP_RECIPE)]
    command += ["--num_processes", "1", *(["--cpu"] if device.type == "cpu" else []), os.path.abspath(__file__)]
    command += ["--section", "fsdp", "--device", device.type, "--output_dir", output_dir]
    process = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    path = os.path.join(output_dir, "fsdp.json")
    if process.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"exit {process.returncode}: {(process.stdout + process.stderr)[-3000:]}")
    with open(path) as f:
        return json.load(f)


def environment(device: torch.device) -> dict:
    import accelerate
    import datasets
    import peft
    import transformers
    import trl

    modules = (torch, transformers, trl, accelerate, peft, datasets)
    return {
        "device": device.type,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "versions": {module.__name__: module.__version__ for module in modules},
    }


def verdict(result: dict) -> str:
    """`error`, `PASS` or `FAIL` for a section (one without checks of its own, like speed, passes when it ran)."""
    checks = [result.get("passed", True)] + [
        v["passed"] for v in result.values() if isinstance(v, dict) and "passed" in v
    ]
    return "error" if "error" in result else "PASS" if all(checks) else "FAIL"


def print_table(report: dict) -> None:
    speed = report.get("speed", {})
    print(
        f"\n{'arm':<8} {'round s':>8} {'gen s':>7} {'score s':>8} {'train s':>8} {'gen tok/s':>10} {'peak GiB':>9} groups"
    )
    for arm, r in speed.get("arms", {}).items():
        peak = f"{r['peak_above_start_gib']:9.2f}" if "peak_above_start_gib" in r else f"{'-':>9}"
        print(
            f"{arm:<8} {r['round_s']:8.2f} {r['generation_s']:7.2f} {r['scoring_s']:8.3f} {r['training_s']:8.2f} "
            f"{r['generation_tokens_per_s']:10.0f} {peak} {r['group_size_min']}..{r['group_size_max']}"
        )
    for name, value in speed.get("ratios_coba_over_grpo", {}).items():
        print(f"CoBA / GRPO {name}: {value:.3f} (target <= 1.05)")
    for name in ("correctness", "speed", "lora", "fsdp"):
        if name in report:
            print(f"{name}: {verdict(report[name])} {report[name].get('error', '')[-300:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--output_dir", default="outputs/gpu_check")
    parser.add_argument("--rounds", type=int, help="measured rounds per speed arm (default: 3 on CUDA, 1 on CPU)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["correctness", "speed", "lora", "fsdp"])
    parser.add_argument("--section", choices=["all", "fsdp"], default="all", help="`fsdp`: the launched child")
    args = parser.parse_args()
    device = torch.device(args.device)
    sizes = QWEN25_05B if device.type == "cuda" else CPU_SMOKE
    sizes = dataclasses.replace(sizes, rounds=args.rounds or sizes.rounds)
    os.makedirs(args.output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as runs:  # the trainers' output_dir (nothing is saved)
        if args.section == "fsdp":
            with open(os.path.join(args.output_dir, "fsdp.json"), "w") as f:
                json.dump(fsdp_round(sizes, device, runs), f)
            return
        sections = {
            "correctness": lambda: check_correctness(device, runs),
            "speed": lambda: measure_speed(sizes, device, runs),
            "lora": lambda: check_lora(sizes, device, runs),
            "fsdp": lambda: check_fsdp(device, args.output_dir, timeout=180),
        }
        report = {"environment": environment(device), "sizes": dataclasses.asdict(sizes)}
        for name in (name for name in sections if name not in args.skip):
            report[name] = run_section(sections[name], device)
            with open(os.path.join(args.output_dir, "gpu_check.json"), "w") as f:
                json.dump(report, f, indent=1)
            print(f"[{name}] {verdict(report[name])} in {report[name]['section_s']:.1f} s", flush=True)
    print_table(report)
    sys.exit(0 if all(verdict(report[name]) == "PASS" for name in sections if name in report) else 1)


def run_section(section, device: torch.device) -> dict:
    """A section's result with its duration; an error is recorded so that the other sections still run."""
    start = time.perf_counter()
    try:
        result = section()
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {error}"}
    free_memory(device)
    return {**result, "section_s": time.perf_counter() - start}


if __name__ == "__main__":
    main()
