"""What CoBA, Knapsack-RL and a uniform split would do with a training set's offline pass rates, before training.

From each prompt's pass rate p_i (`examples/evaluate.py --train_dataset ... --k 8` writes them, or any column of pass
rates) and a run's budget and group bounds, the preview plays the first epoch of a run that allocates from these
priors (`--prior_pass_rate_column`): the prompts in the round sampler's epoch-0 order, cut into the epoch's
floor(N / M) rounds of M = generation_batch_size / num_generations prompts; each round allocated as the trainer's
first rounds are (`coba_trl.rounds.plan.plan_round`: the prior is each prompt's pass rate, the allocator's group sizes,
stranded units topped up); after each round the allocator observes the round's pass rates, the expected outcome,
so CoBA's capability F_t follows the data (before the first round: alpha = kappa - 2, beta = 2, as in a run).

It reports, per allocator, the mean group size by pass-rate band and the expected number of groups holding both a
success and a failure (the groups with a non-zero gradient) under independent draws at each prompt's pass rate,
sum_i [1 - p_i^n_i - (1 - p_i)^n_i], per round and relative to uniform. That is the expectation of a model whose pass
rates are these numbers and do not change during the epoch; a real run's pass rates move. Prompts without a pass
rate (NaN) are allocated as unseen and left out of the expectation. The JSON file also holds each prompt's group size
per allocator, in dataset order (0 for the prompts after the epoch's last whole round), so the figures can be
recomputed from it and the pass rates.

It also reports, per allocator and way of treating groups without spread (all completions rewarded alike), the
completions generated per trained row and per trained row with spread, in the same model (q_i = 1 - p_i^n_i -
(1 - p_i)^n_i, over the prompts of the epoch's rounds that have a pass rate):
  keep (GRPO's default): every generated row is trained; sum n_i / sum n_i q_i per row with spread.
  drop: the same groups are generated and the flat ones left out of the loss, so only rows with spread are trained:
    sum n_i / sum n_i q_i for both.
  refill (dynamic sampling, as DAPO): flat groups are discarded and replaced by the groups of further prompts of
    the same pass rates, sized by the same allocator, until the batch is full; every trained row has spread, and in
    the long run sum n_i / sum n_i q_i completions are generated per trained row.
  refill + skipping (as GRESO): before generation, a prompt whose recent groups all had no spread is skipped with a
    probability that grows with that run (1 - max(p_e^c, 0.01) after c such groups, p_e self-tuning from 0.5). The
    preview's stationary model skips prompt i with s_i = 0.5 (1 - q_i): the chance its previous group had no spread
    times the skip probability after one such group at p_e = 0.5. Generated per trained row (all with spread):
    sum (1 - s_i) n_i / sum (1 - s_i) n_i q_i.
  limit: a generator that knows every pass rate and generates only the prompt whose group of the run's mean size n
    is the likeliest to have spread: 1 / max_i q_i(n), over every prompt with a pass rate (1.01 when one prompt is at
    0.5 with n = 8). No mode with groups of n does better in this model; an allocator's larger groups can.
The skipping figure is a later epoch's: in a run's first epoch no prompt has a history to be skipped by, so the
first epoch costs what refill costs (its own line, "refill + skipping (first epoch)"). The preview also gives the
share of groups without spread under keep, and the rule of thumb that follows from it.

A pass rate measured from k samples is uncertain: 0 of 8 does not mean p = 0. With `--pass_rate_samples k` (what
`examples/evaluate.py --train_dataset ... --k k` passes), q_i is the mean of 1 - p^n - (1 - p)^n over a Beta posterior
of p_i given its k_i p_i successes out of k, from a prior fitted to all the prompts' rates
(`coba_trl.allocation.spread`): a prompt that went 0 of 8 among prompts that mostly succeed is likelier to have
spread than the point estimate says, one among prompts that mostly fail less so. Without it, q_i is taken at p_i.

    python -m coba_trl.preview outputs/pass_rates/train_pass_rates.parquet --generation_batch_size 4096 \\
        --num_generations 16 --min_generations 2 --max_generations 128
    python -m coba_trl.preview outputs/pass_rates/train_pass_rates.parquet \\
        --recipe recipes/qwen2.5-7b-instruct_coba.yaml   # the run a training config describes

It prints the tables and writes them to `allocation_preview.md` and `.json` in `--output_dir` (or `--preview_dir`;
without either, next to the pass-rate file).

The core (`allocation_preview`) is numpy and the allocators; the command adds the sampler's order and the files.
What the command reads, and its one-line error for each bad input, is `coba_trl.preview_inputs`.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from coba_trl.allocation import fill_to_budget
from coba_trl.allocation.spread import population_prior, spread_chance

PREVIEW_FILE = "allocation_preview"  # .md and .json
ALLOCATOR_ORDER = ("coba", "knapsack", "uniform")
BANDS = ("unknown", "0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1")


def band_index(pass_rates: np.ndarray) -> np.ndarray:
    """The index in `BANDS` of each pass rate."""
    p = np.asarray(pass_rates, dtype=float)
    inner = 2 + np.clip(np.ceil(np.nan_to_num(p) * 4).astype(int) - 1, 0, 3)
    return np.select([np.isnan(p), p == 0, p == 1], [0, 1, 6], default=inner)


def mixed_group_probability(pass_rates, group_sizes, samples: int | None = None) -> np.ndarray:
    """P(a group of n_i independent draws at pass rate p_i holds a success and a failure) = 1 - p^n - (1 - p)^n; with
    `samples`, each p_i measured from that many completions, the posterior mean of it (module doc)."""
    p, n = np.asarray(pass_rates, dtype=float), np.asarray(group_sizes, dtype=float)
    if samples is None:
        return 1.0 - p**n - (1.0 - p) ** n
    successes = np.rint(p * samples)
    prior = population_prior(successes, np.full(p.size, samples))
    mixed = np.zeros(np.broadcast(p, n).shape)
    sizes = np.broadcast_to(n, mixed.shape)
    for size in np.unique(sizes):
        where = sizes == size
        mixed[where] = spread_chance(np.broadcast_to(successes, mixed.shape)[where], samples, int(size), prior)
    return mixed


def epoch_group_sizes(pass_rates, budget: int, prompts_per_round: int, allocator) -> np.ndarray:
    """Each prompt's group size over one epoch of rounds (prompts in round order; those after the last whole round
    get 0), the allocator observing each round's pass rates (the expected outcome) after allocating it."""
    p = np.asarray(pass_rates, dtype=float)
    sizes = np.zeros(p.size, dtype=np.int64)
    for start in range(0, p.size - prompts_per_round + 1, prompts_per_round):
        rates = p[start : start + prompts_per_round]
        counts = np.asarray(allocator.allocate(rates, budget), dtype=np.int64)
        stranded = int(allocator.metrics().get("unallocated", 0))
        if stranded:
            counts = fill_to_budget(counts, int(counts.sum()) + stranded, allocator.max_budget)
        sizes[start : start + prompts_per_round] = counts
        known = rates[~np.isnan(rates)]
        if known.size:
            allocator.observe(known)
    return sizes


ZERO_VARIANCE_MODES = ("keep", "drop", "refill", "refill + skipping (first epoch)", "refill + skipping")
SKIP_AFTER_ONE_FLAT_GROUP = 0.5  # GRESO's skip probability after one flat group, at its starting p_e = 0.5


def generated_per_spread_row(pass_rates, group_sizes, weights=None, samples: int | None = None) -> float:
    """Completions generated per row with spread, sum w_i n_i / sum w_i n_i q_i, when prompt i is generated with
    probability w_i (1 = always); inf when no row can have spread. `samples`: as `mixed_group_probability`."""
    p, n = np.asarray(pass_rates, dtype=float), np.asarray(group_sizes, dtype=float)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float)
    generated = float(np.sum(w * n))
    with_spread = float(np.sum(w * n * mixed_group_probability(p, n, samples)))
    return generated / with_spread if with_spread > 0 else math.inf


def rollouts_per_spread_row(pass_rates, group_sizes, samples: int | None = None) -> dict[str, tuple[float, float]]:
    """Per zero-variance mode, (completions generated per trained row, per trained row with spread) for prompts at
    `pass_rates` with groups of `group_sizes`, in the model of the module doc."""
    p, n = np.asarray(pass_rates, dtype=float), np.asarray(group_sizes, dtype=float)
    spread = generated_per_spread_row(p, n, samples=samples)
    skipped = SKIP_AFTER_ONE_FLAT_GROUP * (1.0 - mixed_group_probability(p, n, samples))
    skipping = generated_per_spread_row(p, n, 1.0 - skipped, samples)
    return {
        "keep": (1.0, spread),
        "drop": (spread, spread),
        "refill": (spread, spread),
        "refill + skipping (first epoch)": (spread, spread),  # nothing has a history to be skipped by yet
        "refill + skipping": (skipping,) * 2,
    }


def oracle_per_spread_row(pass_rates, group_size: int, samples: int | None = None) -> float:
    """The limit: completions per row with spread of a generator that generates only the prompt whose group of
    `group_size` is the likeliest to have spread, 1 / max_i q_i; inf when none can."""
    p = np.asarray(pass_rates, dtype=float)
    best = float(mixed_group_probability(p, group_size, samples).max()) if p.size else 0.0
    return 1.0 / best if best > 0 else math.inf


FLAT_SHARE_FOR_REFILL = 0.25  # the rule of thumb's threshold (docs/spending.md, "When to turn each mode on")


def spending_rule(flat_share: float) -> str:
    """The rule of thumb for a share of groups without spread under keep (docs/spending.md)."""
    if flat_share >= FLAT_SHARE_FOR_REFILL:
        return (
            f"{flat_share:.0%} of groups have no spread under keep (at least {FLAT_SHARE_FOR_REFILL:.0%}): their rows "
            "train without gradient. The allocator saves most (Knapsack-RL gives the prompts likely to be flat the "
            "fewest completions); refill gives every trained row a gradient, and skipping cuts what refill costs "
            "once prompts have a history (from the second epoch on)."
        )
    return (
        f"{flat_share:.0%} of groups have no spread under keep (below {FLAT_SHARE_FOR_REFILL:.0%}): refill and "
        "skipping have little to save here; keep, or drop to leave flat groups out of the loss."
    )


@dataclass
class Preview:
    """The preview's figures: settings, then per allocator its group sizes by band and its expected mixed groups."""

    settings: dict
    band_prompts: list[int]
    mean_group_size: dict[str, list[float]]  # allocator -> per band (NaN where the band is empty)
    expected_mixed_per_round: dict[str, float]  # allocator -> sum over the epoch / rounds
    relative_to_uniform: dict[str, float]
    group_sizes: dict[str, np.ndarray] = field(repr=False)  # allocator -> per prompt, dataset order (0 = no round)
    # allocator -> mode -> (generated per trained row, per trained row with spread); the limit's figure
    rollouts_per_spread_row: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    oracle_per_spread_row: float = math.nan
    flat_share_keep: dict[str, float] = field(default_factory=dict)  # allocator -> expected share of flat groups

    def to_json(self) -> dict:
        return {
            "settings": self.settings,
            "bands": [
                {
                    "band": band,
                    "prompts": count,
                    **{f"mean_group_size_{a}": _finite(v[i]) for a, v in self.mean_group_size.items()},
                }
                for i, (band, count) in enumerate(zip(BANDS, self.band_prompts, strict=True))
            ],
            "expected_mixed_groups_per_round": self.expected_mixed_per_round,
            "relative_to_uniform": self.relative_to_uniform,
            "flat_groups_under_keep": self.flat_share_keep,
            "spending_rule": spending_rule(self.flat_share_keep["uniform"])
            if "uniform" in self.flat_share_keep
            else None,
            "group_sizes": {name: sizes.tolist() for name, sizes in self.group_sizes.items()},
            "rollouts_per_trained_row_with_spread": [
                {
                    "allocator": name,
                    "mode": mode,
                    "generated_per_trained_row": _finite(trained),
                    "generated_per_trained_row_with_spread": _finite(spread),
                }
                for name, modes in self.rollouts_per_spread_row.items()
                for mode, (trained, spread) in modes.items()
            ]
            + [
                {
                    "allocator": "limit",
                    "mode": "oracle",
                    "generated_per_trained_row": _finite(self.oracle_per_spread_row),
                    "generated_per_trained_row_with_spread": _finite(self.oracle_per_spread_row),
                }
            ],
        }

    def to_markdown(self) -> str:
        s = self.settings
        names = list(self.mean_group_size)
        lines = [
            f"Allocation preview: {s['prompts_used']} of {s['prompts']} prompts in {s['rounds']} round{'' if s['rounds'] == 1 else 's'} of "
            f"{s['prompts_per_round']} prompts, {s['budget']} completions a round (mean {s['num_generations']}, "
            f"bounds {s['min_generations']} to {s['max_generations']}); {s['known']} prompts with a pass rate.",
            "",
            "Mean group size by pass-rate band:",
            "",
            "| pass rate | prompts | " + " | ".join(names) + " |",
            "|---|---:|" + "---:|" * len(names),
        ]
        for i, band in enumerate(BANDS):
            if self.band_prompts[i]:
                sizes = " | ".join(f"{self.mean_group_size[a][i]:.1f}" for a in names)
                lines.append(f"| {band} | {self.band_prompts[i]} | {sizes} |")
        lines += [
            "",
            "Expected groups with both a success and a failure per round, if each prompt's completions succeed "
            "independently at its pass rate (that model's expectation, sum_i 1 - p_i^n_i - (1 - p_i)^n_i):",
            "",
            "| allocator | expected mixed groups / round | relative to uniform |",
            "|---|---:|---:|",
        ]
        for a in names:
            lines.append(f"| {a} | {self.expected_mixed_per_round[a]:.2f} | {self.relative_to_uniform[a]:.3f} |")
        if self.rollouts_per_spread_row:
            lines += [
                "",
                "Rollouts generated per trained row with spread, in the same model (keep trains every row; drop, "
                "refill and refill + skipping train only rows with spread; refill replaces flat groups by further "
                "prompts' groups, skipping leaves out half of the prompts whose last group was flat; the limit "
                f"generates only the prompt likeliest to have spread, at {s['num_generations']} completions):",
                "",
                "| allocator | mode | generated per trained row | generated per trained row with spread |",
                "|---|---|---:|---:|",
            ]
            for a, modes in self.rollouts_per_spread_row.items():
                for mode, (trained, spread) in modes.items():
                    lines.append(f"| {a} | {mode} | {_figure(trained)} | {_figure(spread)} |")
            limit = _figure(self.oracle_per_spread_row)
            lines.append(f"| limit | oracle | {limit} | {limit} |")
        if self.flat_share_keep:
            shares = ", ".join(f"{a} {share:.1%}" for a, share in self.flat_share_keep.items())
            lines += ["", f"Groups without spread under keep, in the same model: {shares}."]
            if "uniform" in self.flat_share_keep:
                lines.append(spending_rule(self.flat_share_keep["uniform"]))
        return "\n".join(lines) + "\n"


def _finite(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _figure(value: float) -> str:
    """Two decimals; "none" where no row has spread."""
    return f"{value:.2f}" if math.isfinite(value) else "none"


def allocation_preview(
    pass_rates, budget: int, num_generations: int, allocators: dict, order=None, samples: int | None = None
) -> Preview:
    """The preview of `allocators` (name -> fresh allocator) on `pass_rates` (dataset order), whose prompts enter the
    rounds in `order` (dataset indices; None = dataset order), as the module doc says; `samples`: the completions
    each pass rate was measured from (None: take q_i at p_i). The group sizes it returns are in dataset order, 0 for
    the prompts after the epoch's last whole round."""
    p = np.asarray(pass_rates, dtype=float)
    order = np.arange(p.size) if order is None else np.asarray(order, dtype=np.int64)
    prompts_per_round = budget // num_generations
    rounds = p.size // prompts_per_round
    if rounds == 0:
        raise ValueError(
            f"{p.size} prompts are fewer than one round's {prompts_per_round} (generation_batch_size {budget} / "
            f"num_generations {num_generations}); lower generation_batch_size or preview more prompts."
        )
    used = order[: rounds * prompts_per_round]
    bands = band_index(p[used])
    known = used[~np.isnan(p[used])]
    sizes = {}
    for name, allocator in allocators.items():
        sizes[name] = np.zeros(p.size, dtype=np.int64)
        sizes[name][order] = epoch_group_sizes(p[order], budget, prompts_per_round, allocator)
    mean_size = {
        name: [float(s[used][bands == b].mean()) if np.any(bands == b) else math.nan for b in range(len(BANDS))]
        for name, s in sizes.items()
    }
    mixed_of = {name: mixed_group_probability(p[known], s[known], samples) for name, s in sizes.items()}
    mixed = {name: float(q.sum()) / rounds for name, q in mixed_of.items()}
    flat = {name: float(1.0 - q.mean()) if q.size else math.nan for name, q in mixed_of.items()}
    base = mixed.get("uniform", math.nan)
    relative = {name: value / base if base > 0 else math.nan for name, value in mixed.items()}
    bounds = next(iter(allocators.values()))
    settings = {
        "prompts": int(p.size),
        "prompts_used": int(used.size),
        "known": int(known.size),
        "rounds": int(rounds),
        "prompts_per_round": int(prompts_per_round),
        "budget": int(budget),
        "num_generations": int(num_generations),
        "min_generations": int(bounds.min_budget),
        "max_generations": int(bounds.max_budget),
        "pass_rate_samples": samples,
    }
    counts = [int(np.sum(bands == b)) for b in range(len(BANDS))]
    per_spread_row = {name: rollouts_per_spread_row(p[known], s[known], samples) for name, s in sizes.items()}
    oracle = oracle_per_spread_row(p[~np.isnan(p)], num_generations, samples)
    return Preview(settings, counts, mean_size, mixed, relative, sizes, per_spread_row, oracle, flat)


def write_preview(preview: Preview, output_dir: str, extra_settings: dict | None = None) -> tuple[str, str]:
    """`<output_dir>/allocation_preview.md` and `.json`; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    md_path, json_path = (os.path.join(output_dir, f"{PREVIEW_FILE}.{ext}") for ext in ("md", "json"))
    with open(md_path, "w") as handle:
        handle.write(preview.to_markdown())
    payload = preview.to_json()
    payload["settings"].update(extra_settings or {})
    with open(json_path, "w") as handle:
        json.dump(payload, handle, indent=2)
    return md_path, json_path


def round_order(num_prompts: int, prompts_per_round: int, seed: int, shuffle: bool = True) -> list[int]:
    """The dataset order of a run's first epoch, as `coba_trl.rounds.sampling.RoundSampler` draws it."""
    from coba_trl.rounds.sampling import RoundSampler

    return RoundSampler(num_prompts, prompts_per_round, shuffle=shuffle, seed=seed).permutation(0)


def preview_run(pass_rates, config, samples: int | None = None) -> Preview:
    """The preview at a `CoBAConfig`'s budget (generation_batch_size), mean group size, bounds, allocator parameters,
    seed and shuffling: the three allocators on the prompts in the run's first-epoch order; `samples` as in
    `allocation_preview`."""
    p = np.asarray(pass_rates, dtype=float)
    prompts_per_round = config.prompts_per_round
    order = round_order(p.size, prompts_per_round, config.seed, config.shuffle_dataset) if p.size else None
    allocators = {name: config.build_allocator(name) for name in ALLOCATOR_ORDER}
    return allocation_preview(p, config.generation_batch_size, config.num_generations, allocators, order, samples)


@dataclass
class PreviewArguments:
    """
    Where the pass rates are and where the preview goes; the run's budget and bounds are `CoBAConfig`'s flags.

    Parameters:
        pass_rates (`str`):
            A .parquet / .jsonl / .json file (or folder of them) or a Hub dataset with a pass-rate column, such as
            the `train_pass_rates.parquet` that `examples/evaluate.py --train_dataset` writes, or a .json file holding
            a bare list of pass rates in dataset order. Also the first argument.
        pass_rate_column (`str`, *optional*, defaults to `"pass_rate"`):
            The column of pass rates in [0, 1] (null / NaN = unknown).
        recipe (`str` or `None`, *optional*, defaults to `None`):
            A training config (`examples/train_qwen.py --config FILE`): its `CoBAConfig` fields set the run previewed
            (flags override them); its other keys (model, dataset) are checked but not used.
        preview_dir (`str` or `None`, *optional*, defaults to `None`):
            Where `allocation_preview.md` and `.json` go; None = `--output_dir` when given on the command line, else
            the folder of the pass-rate file (or `outputs`).
        pass_rate_samples (`int` or `None`, *optional*, defaults to `None`):
            The completions each pass rate was measured from (`examples/evaluate.py --k`): the chance of a group
            with spread is then averaged over each prompt's uncertain pass rate; None takes it at the pass rate.
    """

    pass_rates: str = field(
        metadata={
            "help": "A .parquet, .jsonl or .json file (or a folder of them) or Hub dataset with a pass-rate column, "
            "or a .json file holding a list of pass rates; also the first argument."
        }
    )
    pass_rate_column: str = field(default="pass_rate", metadata={"help": "The column of pass rates in [0, 1]."})
    recipe: str | None = field(
        default=None, metadata={"help": "A training config whose CoBAConfig fields set the run previewed."}
    )
    preview_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where allocation_preview.md/.json go (as --output_dir); None = the pass-rate file's folder."
        },
    )
    pass_rate_samples: int | None = field(
        default=None,
        metadata={"help": "Completions each pass rate was measured from (evaluate.py's --k); None: point estimates."},
    )


# The parser's dataclasses, PreviewArguments and CoBAConfig, read from source by `check_names_before_import`.
DATACLASSES = [("coba_trl.preview", "PreviewArguments"), ("coba_trl.config", "CoBAConfig")]


def preview_folder(preview_args: PreviewArguments, config, argv: list[str], prog: str) -> str:
    """Where the preview's files go: `--preview_dir`, else `--output_dir` when given as a flag (a recipe's
    `output_dir` is its training run's, not the preview's), else the pass-rate file's folder (or `outputs`)."""
    output_dir = config.output_dir if any(token.split("=", 1)[0] == "--output_dir" for token in argv) else None
    if (
        preview_args.preview_dir
        and output_dir
        and os.path.normpath(preview_args.preview_dir) != os.path.normpath(output_dir)
    ):
        from coba_trl.cli import fail

        fail(
            f"--preview_dir {preview_args.preview_dir} and --output_dir {output_dir} name two folders for the "
            "preview's files; pass one of them.",
            prog,
        )
    if preview_args.preview_dir or output_dir:
        return preview_args.preview_dir or output_dir
    if os.path.isfile(preview_args.pass_rates):
        return os.path.dirname(preview_args.pass_rates) or "."
    return "outputs"


def main(argv: list[str] | None = None) -> Preview:
    """The preview of the command line `argv` (`sys.argv[1:]` when None); each bad input exits with one line on
    stderr (status 2) that names the flag or file and the fix."""
    from coba_trl.cli import CONFIG_FLAG, check_command_line, check_names_before_import, fail

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--pass_rates", *argv]
    if any(token.split("=", 1)[0] == CONFIG_FLAG for token in argv):
        fail(
            "the preview has no --config; pass a training config as --recipe FILE.yaml, and any CoBAConfig field as "
            "a flag (--generation_batch_size 4096)."
        )
    check_names_before_import(argv, DATACLASSES)  # a misspelt flag: refused before CoBAConfig imports torch

    from trl import TrlParser

    from coba_trl.config import CoBAConfig
    from coba_trl.preview_inputs import read_pass_rates, recipe_path, recipe_settings

    parser = TrlParser(
        (PreviewArguments, CoBAConfig),
        usage="python -m coba_trl.preview PASS_RATES [--recipe TRAINING.yaml] [--FIELD VALUE ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the example commands as written
        allow_abbrev=False,  # a prefix of a flag is refused (`check_command_line` names the fields meant)
    )
    parser.error = functools.partial(fail, prog=parser.prog)  # argparse's usage errors in one line too
    check_command_line(parser, argv)
    no_effect = {"use_cpu": True, "report_to": "none", "output_dir": "outputs", "activation_checkpointing": False}
    parser.set_defaults_with_config(**no_effect)  # training settings, which the preview does not use
    recipe = recipe_path(argv, parser.prog)
    if recipe is not None:
        parser.set_defaults_with_config(**recipe_settings(recipe, parser.prog))
    try:
        preview_args, config = parser.parse_args_and_config(args=argv)  # a value CoBAConfig refuses: ValueError
        rates = read_pass_rates(preview_args.pass_rates, preview_args.pass_rate_column)
        samples = preview_args.pass_rate_samples
        if samples is not None and samples < 1:
            raise ValueError(
                f"pass_rate_samples ({samples}) must be at least 1: the completions behind each pass rate."
            )
        preview = preview_run([math.nan if r is None else r for r in rates], config, samples)
    except ValueError as error:
        fail(" ".join(str(error).split()), parser.prog)
    folder = preview_folder(preview_args, config, argv, parser.prog)
    print(preview.to_markdown())
    if config.pass_rate_neighbour_column is not None and any(r is None or math.isnan(r) for r in rates):
        print(
            f"Not previewed: pass_rate_neighbour_column ({config.pass_rate_neighbour_column!r}). The prompts without "
            "a pass rate are previewed as unseen; the trainer gives them their neighbourhood's mean pass rate from the "
            "second round on."
        )
    paths = write_preview(preview, folder, {"pass_rates": preview_args.pass_rates, "seed": config.seed})
    print(f"Wrote {paths[0]} and {paths[1]}.")
    return preview


if __name__ == "__main__":
    main()
