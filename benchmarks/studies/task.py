"""A study's problems on the CPU arithmetic task (its protocol's levels and sizes) and a model's pass rates on them."""

from __future__ import annotations


def problem_sets(protocol: dict):
    """Training prompts, held-out problems and warm-start stream; `protocol["operands"]` sets the digits summed at each
    level, `protocol["levels"]` keeps only those levels of the demo's. `protocol["warm_start_levels"]` and
    `protocol["warm_start_upper_share"]` are the demo's `demo_warm_start_levels` and `demo_warm_start_upper_share`
    (the warm start on the easiest levels, with that share of its problems from the levels above); without them the
    warm start draws from every level.

    A level subset is drawn from the demo's sets scaled up by 5 / len(levels) and filtered, so held-out and training
    questions stay disjoint and the kept levels stay evenly mixed.
    """
    from coba_trl.demo.task import DIFFICULTY_LEVELS, demo_problem_sets

    levels = protocol.get("levels")
    warm_start = {
        "warm_start_levels": protocol.get("warm_start_levels"),
        "warm_start_upper_share": protocol.get("warm_start_upper_share", 0.0),
    }
    sizes = [protocol[key] for key in ("num_train_prompts", "num_heldout", "num_warm_start_problems")]
    if levels is None:  # `protocol["operands"]`: the digits summed at each level (a regime's mix; the demo's default)
        operands = tuple(protocol.get("operands", DIFFICULTY_LEVELS))
        return demo_problem_sets(*sizes, seed=protocol["data_seed"], operands_per_level=operands, **warm_start)
    scale = -(-len(DIFFICULTY_LEVELS) // len(levels))
    sets = demo_problem_sets(*(size * scale for size in sizes), seed=protocol["data_seed"], **warm_start)
    return tuple([p for p in problems if p.level in levels][:size] for problems, size in zip(sets, sizes, strict=True))


def sampled_pass_rates(model, tokenizer, problems, samples: int, max_new_tokens: int, seed: int = 1234) -> list:
    """Per-problem share of `samples` completions whose ``Answer:`` is right (avg@samples, conversion analysis).

    `samples` completions at temperature 1.0, or one greedy completion when `samples` is 0.
    """
    import torch

    from coba_trl.demo.accuracy import extract_integer_answer

    model.eval()
    rates = []
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        for start in range(0, len(problems), 64):
            chunk = problems[start : start + 64]
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": p.question}], add_generation_prompt=True, tokenize=False
                )
                for p in chunk
            ]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if samples else {}
            output = model.generate(
                **batch, max_new_tokens=max_new_tokens, num_return_sequences=max(samples, 1), **sampling
            )
            decoded = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            for index, problem in enumerate(chunk):
                answers = decoded[index * max(samples, 1) : (index + 1) * max(samples, 1)]
                rates.append(sum(extract_integer_answer(a) == problem.answer for a in answers) / len(answers))
    model.train()
    return rates


def level_means(rates: list, problems) -> dict[str, float]:
    """The mean of `rates` over the problems of each level, keyed by the level as a string, in level order."""
    levels: dict[int, list] = {}
    for rate, problem in zip(rates, problems, strict=True):
        levels.setdefault(problem.level, []).append(rate)
    return {str(level): sum(values) / len(values) for level, values in sorted(levels.items())}
