"""The demo's tokenizer and tiny model; `python -m coba_trl.demo.model DIR` writes them for a vLLM server to load.

A vLLM server loads its model from a folder before training starts. For the demo in server mode
(`python examples/train_qwen.py --use_vllm --vllm_mode server`) that folder is this model before its warm start,
with the demo's tokenizer: only the shape matters, since the trainer sends its weights before the first generation.
Flags set the shape as they do for the demo (`--demo_hidden_size`, `--demo_num_layers`, `--demo_num_heads`, `--seed`).
"""

from __future__ import annotations

import argparse
import dataclasses

from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from coba_trl.demo.config import MODEL_SIZE, DemoArguments
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2

MAX_POSITIONS = 128  # the demo's prompts and completions fit well within this


def build_demo_model(demo_args: DemoArguments, seed: int) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """The demo's model before its warm start, and its byte-level tokenizer."""
    tokenizer = build_byte_tokenizer()
    size = {key: getattr(demo_args, name) for name, key in MODEL_SIZE.items()}
    model = build_tiny_qwen2(tokenizer, **size, max_position_embeddings=MAX_POSITIONS, seed=seed)
    return model, tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m coba_trl.demo.model", description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", help="Folder to write the model and tokenizer to.")
    defaults = DemoArguments()
    for name in MODEL_SIZE:
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    parser.add_argument("--seed", type=int, default=0, help="Seed of the initial weights (the demo's default, 0).")
    args = parser.parse_args(argv)
    demo_args = dataclasses.replace(defaults, **{name: getattr(args, name) for name in MODEL_SIZE})
    model, tokenizer = build_demo_model(demo_args, args.seed)
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(f"Wrote the demo's model and tokenizer to {args.output_dir}.")


if __name__ == "__main__":
    main()
