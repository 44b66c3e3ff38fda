# Copyright 2026 The coba-trl contributors. Licensed under the Apache License, Version 2.0.
"""avg@k of a model on AIME24, AIME25, AMC23, MATH500, OlympiadBench and Minerva (the paper's evaluation), or the
per-prompt pass rates of a training set (`--train_dataset`) for `--prior_pass_rate_column`.

Benchmarks: the defaults follow the paper's evaluation (docs/algorithm.md, "Training settings of the released run"):
k = 16 samples per problem, temperature 1.0, top-p 0.9, prompts asking for a final `\\boxed{}` answer. Writes
`eval_results.json` and `eval_results.md` (a row per benchmark and the overall mean) and, per benchmark,
`samples_<name>.jsonl` with every completion and its score to `--output_dir`.

Training set (`--train_dataset`, any source `load_dapo_math` reads): k samples per prompt at the training sampling
(temperature 1.0, top-p 1.0, DAPO's `Answer:` instruction), graded with the training reward (the first of
`--reward_funcs`, as in training; a success when the reward is >= 1.0); writes
`<output_dir>/train_pass_rates.parquet`, the training set with a `pass_rate` column. Train on it with
`--dataset_name <that file> --prior_pass_rate_column pass_rate`, so the allocation starts at step 1 instead of
spending epoch 1 uniform (`coba_trl.pass_rates`). It also prints what CoBA, Knapsack-RL and a uniform split would
allocate from these pass rates (`coba_trl.preview`, written to `allocation_preview.md` / `.json`), at the CPU demo's
budget for `arithmetic` and the recipes' (4096 completions a round, 16 on average, 2 to 128) otherwise.

The CPU demo's model evaluates offline on the demo's own task: `--benchmarks arithmetic` samples the demo's 300
held-out problems, `--train_dataset arithmetic` scores its 512 training prompts (both built as the demo builds them,
for `--regime` and the run's `--seed` given as `--demo_seed` (default 0), in the demo's `Answer: N` format;
completions default to the demo's 12 tokens).

Uses vLLM when it is installed (or `--backend vllm`), transformers otherwise; with transformers a bar shows the
problems sampled and the time left (a redirected log gets a line at each tenth instead). A model or dataset given
as a Hub id needs the Hub; without network, pass a local directory or file.

examples:
  python examples/evaluate.py --model_name_or_path outputs/cpu_demo --benchmarks arithmetic --k 4 \\
      --output_dir outputs/cpu_demo_eval
  python examples/evaluate.py --model_name_or_path outputs/qwen2.5-7b-instruct_coba
  python examples/evaluate.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct --benchmarks aime24 aime25 \\
      --benchmark_paths aime25=opencompass/AIME2025 --k 16 --tensor_parallel_size 2
  python examples/evaluate.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct \\
      --train_dataset BytedTsinghua-SIA/DAPO-Math-17k --k 8 --output_dir outputs/pass_rates
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from dataclasses import asdict, dataclass, field

from coba_trl.cli import (
    check_command_line,
    check_model_before_import,
    check_names_before_import,
    fail,
    requested_model,
    settings_from_config,
)
from coba_trl.numerics import pin_cpu_numerics


def evaluates_demo_model(argv: list[str]) -> bool:
    """True when the model (from the command line or the `--config` file) is a CPU demo's output directory."""
    model = requested_model(argv)
    return model is not None and os.path.isfile(os.path.join(model, "demo_summary.json"))


def evaluates_demo_task(argv: list[str]) -> bool:
    """True when `argv` or its `--config` file asks for the CPU demo's task (`arithmetic` as a benchmark or as the
    training set)."""
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    probe.add_argument("--benchmarks", nargs="*")
    probe.add_argument("--train_dataset", "--train-dataset")
    known, _ = probe.parse_known_args(argv)
    settings = settings_from_config(argv)
    benchmarks = settings.get("benchmarks") or [] if known.benchmarks is None else known.benchmarks
    train_dataset = settings.get("train_dataset") if known.train_dataset is None else known.train_dataset
    return train_dataset == "arithmetic" or "arithmetic" in benchmarks


if __name__ == "__main__":
    check_names_before_import(sys.argv[1:], [(__name__, "EvalArguments")])  # a misspelt flag: before torch loads
    check_model_before_import(sys.argv[1:])  # so is a model path that does not exist
    if evaluates_demo_model(sys.argv[1:]) or evaluates_demo_task(sys.argv[1:]):
        pin_cpu_numerics()  # the demo's model or task: pinned CPU code paths, as the demo pins them (docs/numerics.md)

from trl import TrlParser  # noqa: E402

from coba_trl.data import EVAL_BENCHMARKS, load_dapo_math, load_eval_benchmark  # noqa: E402
from coba_trl.data.sources import (  # noqa: E402
    LOCAL_MODEL,
    check_model_source,
    hub_error,
    hub_unreachable,
    require_hub,
)
from coba_trl.demo.config import DEMO_TRAINING_ARGS, REGIMES, regime_arguments  # noqa: E402
from coba_trl.demo.task import demo_problem_sets, to_prompt_dataset  # noqa: E402
from coba_trl.evaluation import (  # noqa: E402
    evaluate_benchmark,
    markdown_table,
    transformers_generate,
    vllm_generate,
    write_results,
)
from coba_trl.pass_rates import describe, score_training_set, write_pass_rates  # noqa: E402
from coba_trl.preview import main as preview  # noqa: E402
from coba_trl.progress import no_bars_in_a_log  # noqa: E402
from coba_trl.rewards import boxed_accuracy_reward, dapo_accuracy_reward  # noqa: E402

REWARD_FUNCS = {"dapo_accuracy_reward": dapo_accuracy_reward, "boxed_accuracy_reward": boxed_accuracy_reward}
ARITHMETIC = "arithmetic"  # the CPU demo's task, built locally
# The preview's run for a training set other than the demo's: the recipes' (the paper's released run, seed 42).
PAPER_PREVIEW = {
    "generation_batch_size": 4096,
    "num_generations": 16,
    "min_generations": 2,
    "max_generations": 128,
    "seed": 42,
}


@dataclass
class EvalArguments:
    """
    Arguments of the avg@k evaluation.

    Parameters:
        model_name_or_path (`str`):
            Model to evaluate: Hub id or local directory (e.g. a training `output_dir`).
        train_dataset (`str` or `None`, *optional*, defaults to `None`):
            Score this training set (a DAPO-Math Hub id, a local parquet / jsonl / json file, or `arithmetic`, the
            CPU demo's prompts) instead of the benchmarks: writes `train_pass_rates.parquet` with a `pass_rate`
            column.
        regime (`str`, *optional*, defaults to `"demo"`):
            Which regime of the CPU task `arithmetic` means (training prompts and held-out problems):
            `demo` (recipes/cpu_demo.yaml), `hard` (recipes/cpu_demo_hard.yaml) or `frontier`
            (recipes/cpu_demo_frontier.yaml).
        demo_seed (`int` or `None`, *optional*, defaults to `None`):
            The `--seed` of the CPU demo run whose task `arithmetic` means: its training prompts and held-out problems
            depend on it (held-out problems are disjoint from that run's training prompts only). None = the
            regime's seed (0).
        dataset_config (`str` or `None`, *optional*, defaults to `None`):
            Hub config of `train_dataset`, e.g. `all`, `en` or `cn` for `open-r1/DAPO-Math-17k-Processed`.
        dataset_train_split (`str`, *optional*, defaults to `"train"`):
            Split of `train_dataset`.
        reward_funcs (`list[str]`, *optional*, defaults to `["dapo_accuracy_reward"]`):
            The training run's reward functions (`train_qwen.py --reward_funcs`); the first defines a success for the
            pass rates, as it does in training unless `success_reward_func` names another: put that one first.
        benchmarks (`list[str]`, *optional*, defaults to all six):
            Benchmarks to run, among `aime24`, `aime25`, `amc23`, `math500`, `olympiadbench`, `minerva`, or
            `arithmetic` (the CPU demo's held-out problems, built locally).
        benchmark_paths (`list[str]`, *optional*, defaults to `[]`):
            Other sources as `name=path_or_hub_id` (local parquet / jsonl / json files work offline).
        k (`int`, *optional*, defaults to `16`):
            Completions sampled per problem.
        temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature.
        top_p (`float` or `None`, *optional*, defaults to `None`):
            Nucleus sampling threshold; None = 0.9 for benchmarks, 1.0 (TRL's training default) for a training set.
        max_new_tokens (`int` or `None`, *optional*, defaults to `None`):
            Longest completion; None = 4096, or the demo's 12 for a CPU demo's model.
        instruction (`str` or `None`, *optional*, defaults to `None`):
            Answer format the prompt asks for: `boxed`, `answer` (DAPO's `Answer:` line) or `none`; None = `boxed` for
            benchmarks, `answer` (the training format) for a training set.
        max_problems (`int` or `None`, *optional*, defaults to `None`):
            Evaluate only the first N problems of each benchmark or of the training set (quick checks).
        backend (`str`, *optional*, defaults to `"auto"`):
            `vllm`, `transformers`, or `auto` (vLLM when installed).
        output_dir (`str`, *optional*, defaults to `"outputs/eval"`):
            Where the tables and samples go.
    """

    model_name_or_path: str = field(metadata={"help": "Hub id or local directory of the model to evaluate."})
    train_dataset: str | None = field(
        default=None,
        metadata={
            "help": "Score this training set (DAPO-Math Hub id, local file, or 'arithmetic', the CPU demo's prompts) "
            "instead of the benchmarks: writes train_pass_rates.parquet with a pass_rate column for "
            "--prior_pass_rate_column."
        },
    )
    regime: str = field(
        default="demo",
        metadata={"help": "The CPU task's regime that 'arithmetic' means.", "choices": list(REGIMES)},
    )
    demo_seed: int | None = field(
        default=None,
        metadata={
            "help": "The --seed of the CPU demo run whose task 'arithmetic' means (its prompts and held-out "
            "problems); None = the regime's (0)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub config of train_dataset."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split of train_dataset."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["dapo_accuracy_reward"],
        metadata={
            "help": "The training run's reward functions (as train_qwen.py --reward_funcs); the first defines a "
            "success for the pass rates.",
            "choices": list(REWARD_FUNCS),
        },
    )
    benchmarks: list[str] = field(
        default_factory=lambda: list(EVAL_BENCHMARKS),
        metadata={"help": f"Benchmarks to run, among {list(EVAL_BENCHMARKS)}, or '{ARITHMETIC}' (the CPU demo's)."},
    )
    benchmark_paths: list[str] = field(
        default_factory=list,
        metadata={"help": "Other sources as name=path_or_hub_id (e.g. aime24=tests/fixtures/aime24.jsonl)."},
    )
    k: int = field(default=16, metadata={"help": "Completions sampled per problem (avg@k)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float | None = field(
        default=None, metadata={"help": "Nucleus sampling threshold; None = 0.9 (benchmarks) or 1.0 (training set)."}
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "Longest completion; None = 4096, or the demo's 12 for a CPU demo's model."}
    )
    instruction: str | None = field(
        default=None,
        metadata={
            "help": "Answer format the prompt asks for; None = boxed (benchmarks) or answer (training set).",
            "choices": ["boxed", "answer", "none"],
        },
    )
    max_problems: int | None = field(
        default=None, metadata={"help": "Only the first N problems per benchmark or of the training set."}
    )
    backend: str = field(
        default="auto", metadata={"help": "Generation backend.", "choices": ["auto", "vllm", "transformers"]}
    )
    batch_size: int = field(default=64, metadata={"help": "Sequences per transformers generate call."})
    dtype: str = field(default="bfloat16", metadata={"help": "Model dtype (bfloat16, float16, float32, auto)."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM tensor parallel size."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vLLM GPU memory fraction."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    output_dir: str = field(default="outputs/eval", metadata={"help": "Where the tables and samples are written."})

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(
                f"k ({self.k}) must be at least 1: pass the completions to sample per problem, e.g. --k 8."
            )
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(
                f"max_problems ({self.max_problems}) must be at least 1, or left unset for every problem."
            )
        task = self.train_dataset == ARITHMETIC or (self.train_dataset is None and ARITHMETIC in self.benchmarks)
        if self.demo_seed is not None and not task:
            raise ValueError(
                f"demo_seed ({self.demo_seed}) sets the CPU demo's task, which this evaluation does not score: add "
                "--benchmarks arithmetic or --train_dataset arithmetic, or drop --demo_seed."
            )


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written (with its example lines), and every option's default."""


def parse_paths(entries: list[str]) -> dict[str, str]:
    paths = {}
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep or name not in EVAL_BENCHMARKS:
            raise ValueError(
                f"benchmark_paths entry {entry!r} must be name=path with name in {list(EVAL_BENCHMARKS)}."
            )
        paths[name] = path
    return paths


def build_generate(args: EvalArguments):
    if not os.path.isdir(args.model_name_or_path):
        require_hub("model", args.model_name_or_path, LOCAL_MODEL)
    use_vllm = args.backend == "vllm" or (args.backend == "auto" and importlib.util.find_spec("vllm") is not None)
    if use_vllm:
        from vllm import LLM
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # vLLM's CPU build reads gpu_memory_utilization as a share of the machine's memory that must be free at
            # start; a KV cache of its own size (1 GiB unless VLLM_CPU_KVCACHE_SPACE says otherwise) avoids that.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        llm = LLM(
            model=args.model_name_or_path,
            dtype=args.dtype,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            seed=args.seed,
        )
        return vllm_generate(llm, args.max_new_tokens, args.temperature, args.top_p, args.seed), "vllm"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "auto" if args.dtype == "auto" else getattr(torch, args.dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    except OSError as error:  # not a local directory, and not on the Hub or not in the offline cache
        reason = hub_unreachable() or f"{type(error).__name__}: {error}"
        raise hub_error("model", args.model_name_or_path, reason, LOCAL_MODEL) from error
    generate = transformers_generate(
        model, tokenizer, args.max_new_tokens, args.temperature, args.top_p, args.batch_size
    )
    return generate, "transformers"


def fill_mode_defaults(args: EvalArguments) -> EvalArguments:
    """Benchmarks ask for `\\boxed{}` at top-p 0.9 (the paper); a training set is sampled as training samples it; a CPU
    demo's model writes the demo's short completions."""
    training = args.train_dataset is not None
    if args.max_new_tokens is None:
        demo = evaluates_demo_model(["--model_name_or_path", args.model_name_or_path])
        args.max_new_tokens = DEMO_TRAINING_ARGS["max_completion_length"] if demo else 4096
    if args.instruction is None:
        args.instruction = "answer" if training else "boxed"
    if args.top_p is None:
        args.top_p = 1.0 if training else 0.9
    return args


def demo_task(part: str, regime: str = "demo", seed: int | None = None):
    """The CPU task's `"train"` prompts or `"heldout"` problems in `regime`, as the demo builds them for a run with
    `--seed seed` (the regime's seed by default)."""
    training, demo = regime_arguments(regime)
    sizes = (demo.demo_num_train_prompts, demo.demo_num_heldout, 0)
    operands, digits = tuple(demo.demo_operands), demo.demo_operand_digits
    seed = training["seed"] if seed is None else seed
    train, heldout, _ = demo_problem_sets(*sizes, seed=seed, operands_per_level=operands, digits=digits)
    return to_prompt_dataset(train if part == "train" else heldout)


def load_benchmarks(args: EvalArguments) -> dict:
    """The benchmarks to score (name -> dataset), loaded before the model so that a bad name or file fails at once."""
    unknown = [name for name in args.benchmarks if name not in (*EVAL_BENCHMARKS, ARITHMETIC)]
    if unknown:
        raise ValueError(f"benchmarks: unknown {unknown}; choose among {[*EVAL_BENCHMARKS, ARITHMETIC]}.")
    paths = parse_paths(args.benchmark_paths)
    benchmarks = {}
    for name in args.benchmarks:
        if name == ARITHMETIC:
            dataset = demo_task("heldout", args.regime, args.demo_seed)
        else:
            dataset = load_eval_benchmark(name, path=paths.get(name), instruction=args.instruction)
        if args.max_problems is not None:
            dataset = dataset.select(range(min(args.max_problems, len(dataset))))
        benchmarks[name] = dataset
    return benchmarks


def score_benchmarks(args: EvalArguments, benchmarks: dict, generate, backend: str) -> list:
    os.makedirs(args.output_dir, exist_ok=True)
    results = []
    for name, dataset in benchmarks.items():
        samples = os.path.join(args.output_dir, f"samples_{name}.jsonl")
        results.append(evaluate_benchmark(name, dataset, generate, args.k, samples_path=samples))
        print(f"{name}: avg@{args.k} = {results[-1].avg_at_k:.2f} on {results[-1].problems} problems", flush=True)
    settings = {**asdict(args), "backend": backend}
    json_path, md_path = write_results(results, args.output_dir, args.model_name_or_path, settings)
    print(markdown_table(results, args.model_name_or_path))
    print(f"Wrote {json_path} and {md_path}.")
    return results


def load_train_set(args: EvalArguments):
    """The training set to score, loaded before the model so that a set without `prompt` fails at once."""
    if args.train_dataset == ARITHMETIC:
        dataset = demo_task("train", args.regime, args.demo_seed)
    else:
        dataset = load_dapo_math(
            args.train_dataset,
            config=args.dataset_config,
            split=args.dataset_train_split,
            instruction=args.instruction,
        )
    if args.max_problems is not None:
        dataset = dataset.select(range(min(args.max_problems, len(dataset))))
    return dataset


def preview_settings(args: EvalArguments) -> dict:
    """The run the preview assumes: the CPU demo's for `arithmetic`, else the recipes' (the paper's released run)."""
    if args.train_dataset == ARITHMETIC:
        demo = DEMO_TRAINING_ARGS
        budget = demo["per_device_train_batch_size"] * demo["steps_per_generation"]  # one process
        keys = ("num_generations", "min_generations", "max_generations", "seed")
        return {"generation_batch_size": budget, **{key: demo[key] for key in keys}}
    return PAPER_PREVIEW


def training_command(args: EvalArguments, path: str) -> str:
    """The command that trains the evaluated model on the scored set with its pass rates as priors; on a machine
    without CUDA, with the CPU's settings (for `arithmetic`, the demo's prompts as written and its completion length,
    so that it runs as printed)."""
    import torch

    command = (
        f"python examples/train_qwen.py --model_name_or_path {args.model_name_or_path} --dataset_name {path} "
        "--prior_pass_rate_column pass_rate"
    )
    if args.train_dataset == ARITHMETIC:
        completion = DEMO_TRAINING_ARGS["max_completion_length"]
        command += f" --instruction none --max_completion_length {completion} --max_steps 100"
    if not torch.cuda.is_available():
        command += " --use_cpu true --bf16 false"
    return command


def score_train_set(args: EvalArguments, dataset, generate):
    scored = score_training_set(dataset, generate, args.k, REWARD_FUNCS[args.reward_funcs[0]])
    with no_bars_in_a_log():
        path = write_pass_rates(scored, args.output_dir)
    print(f"pass rates at k = {args.k}, graded by {args.reward_funcs[0]}: {describe(scored['pass_rate'])}")
    print(f"Wrote {path}. Train on it, allocating from step 1, with:\n  {training_command(args, path)}")
    settings = preview_settings(args)
    flags = " ".join(f"--{key} {value}" for key, value in settings.items())
    other = f"python -m coba_trl.preview {path} --FIELD VALUE ..."
    round_prompts = settings["generation_batch_size"] // settings["num_generations"]
    if len(scored) < round_prompts:
        print(f"\nNo allocation preview: {len(scored)} prompts are fewer than a round's {round_prompts} at {flags}.")
        print(f"Preview a smaller round with: {other}")
        return scored
    print(f"\nAllocation preview at {flags} (other settings: {other}):")
    preview([path, *flags.split(), "--preview_dir", args.output_dir, "--pass_rate_samples", str(args.k)])
    return scored


def main(argv: list[str] | None = None):
    """Benchmark results (a list of `BenchmarkResult`), or the scored training set with `--train_dataset`."""
    parser = TrlParser(
        (EvalArguments,),
        usage="python examples/evaluate.py --model_name_or_path MODEL [--benchmarks NAME ...] [--FIELD VALUE ...]",
        description=__doc__,
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # a prefix of a flag is refused, with the fields meant
    )
    parser.error = functools.partial(fail, prog=parser.prog)  # argparse's (an invalid choice) in one line too
    argv = sys.argv[1:] if argv is None else argv
    check_command_line(parser, argv)  # unknown flags and config keys, a missing config file: one line each
    try:
        (args,) = parser.parse_args_and_config(args=argv)
    except ValueError as error:  # a value the arguments refuse: one line, before any work
        fail(str(error), parser.prog)
    args = fill_mode_defaults(args)
    try:  # a missing model folder, a Hub id without the Hub: one line, before any data loads
        check_model_source(args.model_name_or_path)
    except ValueError as error:
        fail(" ".join(str(error).split()), parser.prog)
    if args.train_dataset is not None:
        try:  # a dataset that cannot be read or has no prompts: one line, before any model loads
            dataset = load_train_set(args)
        except (ValueError, FileNotFoundError) as error:
            fail(f"--train_dataset {args.train_dataset}: {error}", parser.prog)
        with no_bars_in_a_log():  # the weights' loading bar; the sampling shows its own progress
            generate, _ = build_generate(args)
        return score_train_set(args, dataset, generate)
    try:  # an unknown benchmark, a file that cannot be read: one line, before the model loads
        benchmarks = load_benchmarks(args)
    except (ValueError, FileNotFoundError) as error:
        fail(" ".join(str(error).split()), parser.prog)
    with no_bars_in_a_log():
        generate, backend = build_generate(args)
    return score_benchmarks(args, benchmarks, generate, backend)


if __name__ == "__main__":
    main()
