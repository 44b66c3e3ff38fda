"""What each `generate` call receives in the GPU check's speed arms (`coba`, `grpo`, `uniform`), side by side.

    python benchmarks/gpu_check/generation_rows.py                  # the cpu-speed sizes: 16 prompts x 8 completions of 32 tokens
    python benchmarks/gpu_check/generation_rows.py --device cuda --sizes qwen2.5-0.5b

Trains two rounds of every arm on the check's own trainers (`trainers.make_trainer`) and records, for every
call of the model's `generate`: the rows and their length, the padding, the distinct prompts and how their rows are
laid out (runs of one prompt), the sampling settings, the model's state (train mode, gradient checkpointing, cache,
dtype, attention, grad mode), and what the decoding steps fed the model (steps and their input shapes). It prints
what differs between the arms; everything not listed is identical.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if __name__ == "__main__":  # run as a script: the benchmarks folder, where `gpu_check` is a package, on the path
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from gpu_check.speed import ARMS  # noqa: E402
from gpu_check.trainers import CPU_SMOKE, CPU_SPEED, QWEN25_05B, make_trainer  # noqa: E402

SIZES = {"cpu-speed": CPU_SPEED, "cpu-smoke": CPU_SMOKE, "qwen2.5-0.5b": QWEN25_05B}


def runs(row_keys: list[tuple]) -> list[int]:
    """Lengths of the runs of equal consecutive rows."""
    lengths = []
    for i, key in enumerate(row_keys):
        if i and key == row_keys[i - 1]:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def watch(model, calls: list[dict]) -> None:
    """Record every `generate` call of `model` and the forward steps inside it."""
    generate = model.generate
    steps = []

    def forward_hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        steps.append(tuple(ids.shape))

    model.register_forward_pre_hook(forward_hook, with_kwargs=True)

    def recorded(*args, **kwargs):
        steps.clear()
        output = generate(*args, **kwargs)
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        rows = [tuple(row.tolist()) for row in ids]
        config = kwargs["generation_config"].to_diff_dict()
        calls.append(
            {
                "rows": ids.shape[0],
                "prompt_tokens": ids.shape[1],
                "padding_tokens": int((mask == 0).sum()),
                "distinct_prompts": len(set(rows)),
                "row_runs": runs(rows),
                "generated_tokens": output.shape[1] - ids.shape[1],
                "generation_config": {k: v for k, v in sorted(config.items()) if k != "transformers_version"},
                "training_mode": model.training,
                "gradient_checkpointing": model.is_gradient_checkpointing,
                "config_use_cache": model.config.use_cache,
                "dtype": str(model.dtype),
                "attention": model.config._attn_implementation,
                "grad_enabled": torch.is_grad_enabled(),
                "decode_steps": len(steps),
                "step_shapes": sorted(set(steps)),  # (rows, 1) after the prompt's step: the cache is in use
            }
        )
        return output

    model.generate = recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--sizes", choices=list(SIZES), default="cpu-speed")
    parser.add_argument("--output", help="write every call's record to this JSON file")
    args = parser.parse_args()
    device, sizes = torch.device(args.device), SIZES[args.sizes]
    calls = {}
    with tempfile.TemporaryDirectory(prefix="generation_rows_") as output_dir:
        for arm in ARMS:
            trainer, _ = make_trainer(arm, sizes, device, output_dir, steps=2)
            calls[arm] = []
            watch(trainer.model, calls[arm])
            trainer.train()
    if args.output:
        with open(args.output, "w") as f:
            json.dump(calls, f, indent=1, default=str)
    counts = {arm: len(c) for arm, c in calls.items()}
    print(f"generate calls (2 rounds): {counts}")
    for key in calls[ARMS[0]][0]:
        values = {arm: [call[key] for call in c] for arm, c in calls.items()}
        if len({json.dumps(v, default=str) for v in values.values()}) == 1:
            print(f"  same in every arm   {key}: {values[ARMS[0]][0]}")
        else:
            for arm, v in values.items():
                print(f"  differs  {arm:<8} {key}: {v}")


if __name__ == "__main__":
    main()
