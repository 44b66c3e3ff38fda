"""avg@k evaluation on the math benchmarks (docs/algorithm.md, "Training settings of the released run":
avg@16, temperature 1.0, top-p 0.9).

avg@k of a benchmark is the mean, over its problems, of the fraction of the k sampled completions that are correct,
in percent; the overall score is the unweighted mean over benchmarks (how the paper's "overall avg" is formed).
Completions are graded with `boxed_accuracy_reward` (last `\\boxed{}` or an `answer:` marker, then symbolic
equivalence), the grader of the published table. Generation is pluggable: `transformers_generate` here, or vLLM
(`vllm_generate`) when it is installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from coba_trl.progress import progress
from coba_trl.rewards import boxed_accuracy_reward

GenerateFn = Callable[[list[list[dict]], int], list[list[str]]]
"""Takes chat prompts and k; returns k completion texts per prompt."""


@dataclass
class BenchmarkResult:
    benchmark: str
    avg_at_k: float
    k: int
    problems: int
    completions: int


def avg_at_k(scores: list[list[float]]) -> float:
    """Mean over problems of the mean score of each problem's k completions, in percent."""
    if not scores:
        raise ValueError("avg_at_k needs at least one problem.")
    return 100.0 * sum(sum(row) / len(row) for row in scores) / len(scores)


def score_completions(completions: list[list[str]], solutions: list[str]) -> list[list[float]]:
    """0/1 correctness of every completion (one row per problem)."""
    flat = [text for row in completions for text in row]
    gold = [solution for row, solution in zip(completions, solutions, strict=True) for _ in row]
    rewards = boxed_accuracy_reward(flat, gold)
    scores, start = [], 0
    for row in completions:
        scores.append(rewards[start : start + len(row)])
        start += len(row)
    return scores


def evaluate_benchmark(name: str, dataset, generate: GenerateFn, k: int, samples_path: str | None = None):
    """avg@k of one benchmark (rows with `prompt` chat messages and `solution`); optionally writes every sample."""
    prompts, solutions = list(dataset["prompt"]), list(dataset["solution"])
    completions = generate(prompts, k)
    scores = score_completions(completions, solutions)
    if samples_path is not None:
        with open(samples_path, "w") as handle:
            for prompt, solution, texts, row in zip(prompts, solutions, completions, scores, strict=True):
                record = {"prompt": prompt, "solution": solution, "completions": texts, "scores": row}
                handle.write(json.dumps(record) + "\n")
    return BenchmarkResult(name, avg_at_k(scores), k, len(prompts), sum(len(row) for row in completions))


def overall(results: list[BenchmarkResult]) -> float:
    """Unweighted mean of the benchmarks' avg@k."""
    return sum(r.avg_at_k for r in results) / len(results)


def markdown_table(results: list[BenchmarkResult], model: str) -> str:
    k = results[0].k
    lines = [f"| Benchmark | avg@{k} | Problems | Completions |", "|---|---|---|---|"]
    lines += [f"| {r.benchmark} | {r.avg_at_k:.2f} | {r.problems} | {r.completions} |" for r in results]
    lines.append(f"| **overall (mean)** | **{overall(results):.2f}** | {sum(r.problems for r in results)} | |")
    return f"Model: `{model}`\n\n" + "\n".join(lines) + "\n"


def write_results(results: list[BenchmarkResult], output_dir: str, model: str, settings: dict) -> tuple[str, str]:
    """Write ``eval_results.json`` and ``eval_results.md`` to `output_dir`; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    payload = {
        "model": model,
        "settings": settings,
        "benchmarks": {r.benchmark: asdict(r) for r in results},
        "overall": overall(results),
    }
    json_path, md_path = os.path.join(output_dir, "eval_results.json"), os.path.join(output_dir, "eval_results.md")
    with open(json_path, "w") as handle:
        json.dump(payload, handle, indent=2)
    with open(md_path, "w") as handle:
        handle.write(markdown_table(results, model))
    return json_path, md_path


def transformers_generate(
    model, tokenizer, max_new_tokens: int, temperature: float, top_p: float, batch_size: int = 32
) -> GenerateFn:
    """Sampling with `model.generate`, `batch_size` sequences at a time (left padding), showing the problems done and
    the time left (`coba_trl.progress`)."""
    import torch

    tokenizer.padding_side = "left"

    @torch.no_grad()
    def generate(prompts: list[list[dict]], k: int) -> list[list[str]]:
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        repeated = [text for text in texts for _ in range(k)]
        outputs = []
        bar, finished = progress(len(prompts), f"Sampling {k} per problem", "problems"), 0
        for start in range(0, len(repeated), batch_size):
            batch = tokenizer(
                repeated[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(model.device)
            generated = model.generate(
                **batch,
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                top_k=0,  # no top-k cut, as TRL samples in training (GRPOConfig.top_k = 0) and vLLM by default
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
            completion_ids = generated[:, batch["input_ids"].shape[1] :]
            outputs += tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
            bar.update(len(outputs) // k - finished)  # problems whose k completions are all sampled
            finished = len(outputs) // k
        bar.close()
        return [outputs[i * k : (i + 1) * k] for i in range(len(prompts))]

    return generate


def vllm_generate(llm, max_new_tokens: int, temperature: float, top_p: float, seed: int) -> GenerateFn:
    """Sampling with a `vllm.LLM` (k completions per prompt in one request, `n = k`)."""
    from vllm import SamplingParams

    def generate(prompts: list[list[dict]], k: int) -> list[list[str]]:
        params = SamplingParams(n=k, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed)
        return [[choice.text for choice in output.outputs] for output in llm.chat(prompts, params)]

    return generate
