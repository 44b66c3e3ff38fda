"""The trainers of the GPU check (`check.py`): model sizes, synthetic prompts and rewards, an instrumented
GRPOTrainer or CoBAGRPOTrainer, and `run_arm`, which trains one arm and returns its times, tokens and memory.

The rewards are synthetic: a completion succeeds with its prompt's `pass_rate`, drawn from a hash of its token ids,
so two trainers that generate the same completions score them alike.
"""

from __future__ import annotations

import dataclasses
import gc
import time
import zlib
from collections import Counter, defaultdict

import numpy as np
import torch
from datasets import Dataset
from torch.distributed.fsdp import FSDPModule
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2


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
    rounds: int  # measured speed cycles (one round of every arm each), after one warm-up cycle
    small_prompts: int  # LoRA and FSDP rounds
    small_tokens: int


QWEN25_05B = Sizes(896, 24, 14, 2, 4864, 151_936, 64, 8, 128, 8, rounds=8, small_prompts=16, small_tokens=64)
CPU_SMOKE = Sizes(32, 2, 4, 2, 64, 512, 4, 4, 8, 2, rounds=1, small_prompts=4, small_tokens=8)
CPU_SPEED = Sizes(128, 4, 4, 2, 512, None, 16, 8, 32, 2, rounds=8, small_prompts=4, small_tokens=8)
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
        self.device = device
        self.times, self._last = [], None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = clock(self.device)

    def on_step_end(self, args, state, control, **kwargs):
        now = clock(self.device)
        self.times.append(now - self._last)
        self._last = now


def qwen2(sizes: Sizes, tokenizer, device: torch.device, dtype: torch.dtype, attention: str = "sdpa"):
    """A randomly initialised Qwen2 of `sizes`' shape, built on `device`."""
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
    model.set_attn_implementation(attention)
    return model.to(dtype)


def make_trainer(
    arm: str,
    sizes: Sizes,
    device: torch.device,
    output_dir: str,
    steps: int,
    small: bool = False,
    dtype=torch.bfloat16,
    attention: str = "sdpa",
    model_device=None,
    processes: int = 1,
    dataset=None,
    peft_config=None,
    **overrides,
):
    """A fresh model and an instrumented GRPOTrainer (`grpo`) or CoBAGRPOTrainer (`uniform`; `coba` allocating from
    the prior pass-rate column), one optimizer step per round of `prompts * group` completions over `processes`
    processes; and its reward."""
    prompts, tokens = (sizes.small_prompts, sizes.small_tokens) if small else (sizes.prompts, sizes.completion_tokens)
    tokenizer, reward = build_byte_tokenizer(), BernoulliReward()
    config = {
        "output_dir": output_dir,
        "per_device_train_batch_size": prompts * sizes.group // (sizes.micro_batches * processes),
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
        qwen2(sizes, tokenizer, model_device or device, dtype, attention),
        reward,
        args=args,
        train_dataset=prompt_dataset(prompts * steps) if dataset is None else dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer, reward


def free_memory(device: torch.device) -> int:
    """Collect garbage, empty the allocator cache, reset the peak; the bytes still allocated (0 on CPU)."""
    gc.collect()
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def plain(value):
    """`json.dump`'s `default`: a numpy or torch value as JSON can hold it (a scalar's Python value, an array's list),
    anything else as text, so one odd figure never stops a write."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def logged(trainer, key: str) -> list[float]:
    """Every value of `key` (`loss`, `grad_norm`) the trainer logged, one per optimizer step."""
    return [h[key] for h in trainer.state.log_history if key in h]


def sharding(trainer) -> dict:
    """Whether FSDP2 wrapped the trainer's model, and over how many processes its first parameter is sharded."""
    mesh = getattr(next(trainer.model.parameters()), "device_mesh", None)
    return {
        "fsdp2_sharded": any(isinstance(model, FSDPModule) for model in (trainer.model, trainer.model_wrapped)),
        "sharded_over": mesh.size() if mesh is not None else 1,
    }


def run_arm(
    arm: str,
    sizes: Sizes,
    device: torch.device,
    output_dir: str,
    rounds: int,
    **kwargs,
) -> dict:
    """Train `rounds` rounds of one arm on a fresh model (the LoRA and FSDP sections): means of the round time and
    its split, tokens per second, peak memory, group sizes, and how accelerate ran it."""
    start_memory = free_memory(device)
    trainer, reward = make_trainer(arm, sizes, device, output_dir, steps=rounds, **kwargs)
    round_clock = RoundClock(device)
    trainer.add_callback(round_clock)
    trainer.train()
    per_round = {
        "round": round_clock.times,
        "generation": trainer.probe["generation_s"],
        "generate_and_score": trainer.probe["generate_and_score_s"],
    }
    total, generation, scored = (np.array(per_round[key]) for key in per_round)
    tokens = float(np.mean([call[2] for call in reward.calls]))
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
        "loss": logged(trainer, "loss"),
        "grad_norm": logged(trainer, "grad_norm"),
        "per_round_s": per_round,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "num_processes": trainer.accelerator.num_processes,
        **sharding(trainer),
    }
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        result.update(
            peak_memory_gib=peak / 2**30,
            peak_above_start_gib=(peak - start_memory) / 2**30,
            peak_reserved_gib=torch.cuda.max_memory_reserved(device) / 2**30,
        )
    return result
