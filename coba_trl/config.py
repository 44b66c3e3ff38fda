"""`CoBAConfig`: `GRPOConfig` plus the fields of CoBA-RL's rollout-budget allocation (docs/algorithm.md,
"Pass rate of a prompt" to "Allocating one round")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from trl import GRPOConfig

ALLOCATORS = ("coba", "knapsack", "uniform")
ZERO_VARIANCE_MODES = ("keep", "drop", "rescue", "refill")
SKIP_RULES = ("greso", "spread_chance")
SKIP_PRIORS = ("population", "neighbourhood")
GROUP_WEIGHTINGS = ("row", "prompt")

# The field that switches activation checkpointing in the installed transformers' TrainingArguments:
# `activation_checkpointing` from transformers 5.23 (`gradient_checkpointing` stays a deprecated alias), before that
# `gradient_checkpointing`. TRL's `GRPOConfig` takes this name; `CoBAConfig` takes `activation_checkpointing` on both.
CHECKPOINTING_FIELD = (
    "activation_checkpointing"
    if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
    else "gradient_checkpointing"
)

if CHECKPOINTING_FIELD == "activation_checkpointing":
    _GRPOConfig = GRPOConfig
else:

    @dataclass
    class _GRPOConfig(GRPOConfig):
        """`GRPOConfig` with the name transformers 5.23 gave `gradient_checkpointing`, for older transformers: recipes
        and `--activation_checkpointing` work with either. The two fields then hold the same value, as they do on
        newer transformers, and `activation_checkpointing` wins where both are given."""

        activation_checkpointing: bool | None = field(
            default=None,
            metadata={
                "help": "Enable activation checkpointing to trade compute for memory. Reduces memory at the cost of "
                "~20%% slower training.",
                "nargs": "?",
                "const": True,
            },
        )

        def __post_init__(self):
            if self.activation_checkpointing is not None:
                self.gradient_checkpointing = self.activation_checkpointing
            self.activation_checkpointing = self.gradient_checkpointing
            super().__post_init__()


# The CoBAConfig field behind each argument of `coba_trl.allocation.build_allocator`, for refusals that name the field.
ALLOCATOR_FIELDS = {
    "min_budget": "min_generations",
    "max_budget": "max_generations",
    "kappa": "coba_kappa",
    "window": "coba_window",
    "gamma": "coba_gamma",
    "tau": "coba_tau",
    "heap_fraction": "coba_heap_fraction",
    "hard_threshold": "coba_hard_threshold",
    "easy_threshold": "coba_easy_threshold",
}


@dataclass
class CoBAConfig(_GRPOConfig):
    r"""
    Configuration class for [`CoBAGRPOTrainer`]: GRPO with a per-prompt number of generations chosen by CoBA-RL
    (arXiv 2602.03048) or Knapsack-RL (arXiv 2509.25849).

    `num_generations` keeps its TRL meaning as the *mean* group size G: one generation round makes
    `generation_batch_size` completions for `generation_batch_size / num_generations` distinct prompts, and the
    allocator splits that fixed total unevenly over the prompts. With `budget_allocator="uniform"` every prompt gets
    exactly G completions, which is plain GRPO. All other parameters are those of [`~trl.GRPOConfig`].

    Parameters:
        > Parameters that control the budget allocation

        budget_allocator (`str`, *optional*, defaults to `"coba"`):
            How a round's completions are split over its prompts: `"coba"` (CoBA-RL's capability-oriented value
            function and heap greedy), `"knapsack"` (Knapsack-RL's value, arXiv 2509.25849) or `"uniform"` (every
            prompt gets `num_generations`, i.e. GRPO).
        min_generations (`int`, *optional*, defaults to `2`):
            Fewest completions a prompt can get (B_low). At most `num_generations`.
        max_generations (`int`, *optional*, defaults to `128`):
            Most completions a prompt can get (B_up). At least `num_generations`.

        two_phase_rounds (`bool`, *optional*, defaults to `False`):
            Generate each round in two phases: first `min_generations` completions for every prompt, whose results
            update the pass-rate estimates, then the rest of the round's budget, allocated from those fresh estimates.
            Costs a second generation pass per round. Not in the released code.
        zero_variance_groups (`str`, *optional*, defaults to `"keep"`):
            What happens to groups whose completions are all rewarded alike (no gradient): `"keep"` (released code),
            `"drop"` (left out of the loss and its token normalisation, as DAPO's filter does) or, with
            `two_phase_rounds`, `"rescue"` (phase 2 first gives each group that was all-equal in phase 1 another
            `min_generations` completions, taken from the largest other groups) or `"refill"` (dynamic sampling: such
            groups are discarded and replaced by groups of the next prompts of the epoch, generated in further phases
            and sized by the allocator, until the round's `generation_batch_size` rows all come from groups with
            spread; docs/spending.md).
        max_refill_phases (`int`, *optional*, defaults to `8`):
            With `zero_variance_groups="refill"`: the most generation phases of replacement prompts a round may add.
            Past it the round trains on the rows with spread it has (the rest of its rows are left out of the loss)
            and logs `coba/refill_bound_reached`. Like DAPO's `max_num_gen_batches`, counting only the extra phases.
        skip_settled_prompts (`bool`, *optional*, defaults to `False`):
            GRESO's selective rollout (arXiv 2506.02177): before a round is generated, a prompt whose latest groups
            were all solved (or all failed) `c` times in a row is skipped with probability `1 - max(p^c, 0.01)`, with
            one `p` for solved and one for failed prompts, each tuned by 0.01 per round towards its share of
            `skip_target_zero_spread`. Skipped prompts are replaced by the next prompts of the epoch and come back
            in later epochs; a prompt is never skipped more than `max_skips_in_a_row` visits in a row.
        skip_target_zero_spread (`float`, *optional*, defaults to `0.25`):
            The share of generated groups without spread that skipping aims at: a third of it for all-solved
            groups, two thirds for all-failed ones (GRESO's split).
        max_skips_in_a_row (`int`, *optional*, defaults to `3`):
            A prompt skipped on this many visits in a row is generated on its next one, so every prompt is seen at
            least once every `max_skips_in_a_row + 1` epochs, whatever its history.
        skip_rule (`str`, *optional*, defaults to `"greso"`):
            Which prompts `skip_settled_prompts` skips: `"greso"` (GRESO's rule: a prompt whose latest groups were
            all solved or all failed, with a probability that rises with their run, self-tuned towards
            `skip_target_zero_spread`) or `"spread_chance"` (a prompt whose chance that a group of `num_generations`
            has spread, under a Beta posterior over its pass rate, is below `skip_min_spread_chance`; with the default
            `skip_prior`, never a prompt not seen yet). `"spread_chance"` needs `skip_settled_prompts=True`.
        skip_min_spread_chance (`float`, *optional*, defaults to `0.5`):
            With `skip_rule="spread_chance"`: the chance of a group with spread below which a prompt is skipped.
        skip_prior (`str`, *optional*, defaults to `"population"`):
            With `skip_rule="spread_chance"`: what a prompt's Beta prior over its pass rate is fitted to.
            `"population"`: every prompt seen so far; a prompt not seen yet is never skipped. `"neighbourhood"`: the
            seen prompts of the prompt's own neighbourhood (`pass_rate_neighbour_column`, e.g. a difficulty level),
            refitted after every round, and a prompt not seen yet is skipped by its neighbourhood's chance once two of
            its neighbours were seen: flat groups are predicted from the first epoch on, and a neighbourhood that
            starts succeeding brings its prompts back. Needs `pass_rate_neighbour_column`.
        group_weighting (`str`, *optional*, defaults to `"row"`):
            How much a prompt's group weighs in the loss. `"row"` (released code, and every TRL loss): each completion
            row counts once, so a prompt given 64 rows weighs 44.9 times one given 2 at the default
            `scale_rewards="group"` (32 times with `"batch"` or `"none"`; `benchmarks/group_weight.py`). `"prompt"`:
            each row's advantage is multiplied by n_bar / n_i (n_bar = `generation_batch_size` / prompts per round,
            n_i = the row's whole group size, both phases counted), so every prompt's rows together weigh what one
            GRPO group weighs (token-normalised losses: up to length differences). The KL term (`beta > 0`) is not
            reweighted. With `budget_allocator="uniform"` both modes are GRPO exactly. A project extension.
        log_allocations (`bool`, *optional*, defaults to `True`):
            Write one JSON line per generation round to `<output_dir>/coba_rounds.jsonl` (process 0): the prompts, the
            pass rates and allocator state the allocation used, phase-1 results, the group sizes and the successes
            (`coba_trl.rounds.log`). A resumed run continues the file of the run it resumes.

        > Parameters that control the capability estimate of CoBA-RL

        coba_kappa (`float`, *optional*, defaults to `11.0`):
            Concentration kappa = alpha_t + beta_t of the Beta value density; alpha_t is clipped to [1, kappa - 1].
        coba_window (`int`, *optional*, defaults to `1`):
            Number k of past rounds whose failure rates F_t are averaged into F_bar_t.
        coba_gamma (`float`, *optional*, defaults to `10.0`):
            Slope gamma of the sigmoid that maps F_bar_t <= 0.5 to F_tilde_t.
        coba_tau (`float` or `None`, *optional*, defaults to `None`):
            Saturation scale tau of the value function. `None` recomputes it each round from the spread of the pass
            rates (tau in [3, 12], as the released code does).
        coba_heap_fraction (`float` or `None`, *optional*, defaults to `None`):
            Share of the budget above B_low handed out by the heap greedy. `None` uses the released rule (0.6 to 0.8
            depending on how many prompts are in the exploration band); `1.0` with thresholds 0 and 1 is the paper's
            pure-heap description.
        coba_hard_threshold (`float`, *optional*, defaults to `0.05`):
            Prompts with a pass rate below this are "very hard": they skip the heap and share the leftover budget.
        coba_easy_threshold (`float`, *optional*, defaults to `0.99`):
            Prompts with a pass rate above this are "very easy": they skip the heap and come last for leftovers.

        > Parameters that control the pass-rate history

        pass_rate_window (`int`, *optional*, defaults to `1`):
            Number of past appearances of a prompt pooled into its pass rate p_i.
        pass_rate_prior_strength (`float`, *optional*, defaults to `0.0`):
            Pseudo-count s of a Beta prior on each prompt's pass rate: p_i = (S_i + s * m_i) / (N_i + s) for S_i
            successes in N_i pooled rollouts, so tiny groups do not read as p = 0 or 1. The prior mean m_i is the
            prompt's offline prior pass rate (`prior_pass_rate_column`) where it has one, else the mean pass rate
            over prompts of the latest round (1 - F_t). `0` is the released empirical rate S_i / N_i. Feeds every
            allocator. A project extension, not in the released code.
        success_reward_func (`str`, `list[str]` or `None`, *optional*, defaults to `None`):
            Name of the reward function (as logged under `rewards/<name>/mean`) whose value defines a success, or
            several names: a completion's success reward is then the first of them that scored it (with several
            environments, each environment's `get_reward`, which leaves the other environments' rows unscored).
            `None` uses the first reward function.
        success_threshold (`float`, *optional*, defaults to `1.0`):
            A completion is a success when that reward is >= this value, so continuous rewards work too. A completion
            without a success reward (NaN) is neither a success nor a failure.
        prompt_id_column (`str` or `None`, *optional*, defaults to `None`):
            Dataset column holding a stable prompt id (str or int). `None` uses the dataset row index.
        prior_pass_rate_column (`str` or `None`, *optional*, defaults to `None`):
            Dataset column holding an offline pass-rate estimate in [0, 1] (NaN or None = unknown), used for prompts
            without history so allocation can start at the first step, and as the prior mean m_i of
            `pass_rate_prior_strength`.
        pass_rate_neighbour_column (`str` or `None`, *optional*, defaults to `None`):
            Dataset column that puts prompts into neighbourhoods (a difficulty level, a topic, a source; None or NaN =
            none). A prompt's prior pass rate becomes its neighbourhood's current mean: the mean pass rate of the
            neighbourhood's prompts that have a history. Prompts without history start from it (an offline prior from
            `prior_pass_rate_column` comes first), so allocation acts from the second round of the first epoch on,
            and with `pass_rate_prior_strength` > 0 every prompt is shrunk towards it, so a prompt last seen unsolved
            gets budget again when its neighbours start succeeding. A project extension, not in the released code.
    """

    budget_allocator: str = field(
        default="coba",
        metadata={
            "help": "How a round's completions are split over its prompts: 'coba' (CoBA-RL, arXiv 2602.03048), "
            "'knapsack' (Knapsack-RL, arXiv 2509.25849) or 'uniform' (every prompt gets num_generations, i.e. GRPO).",
            "choices": list(ALLOCATORS),
        },
    )
    min_generations: int = field(
        default=2,
        metadata={"help": "Fewest completions a prompt can get (B_low). At most num_generations."},
    )
    max_generations: int = field(
        default=128,
        metadata={"help": "Most completions a prompt can get (B_up). At least num_generations."},
    )
    two_phase_rounds: bool = field(
        default=False,
        metadata={
            "help": "Screen every prompt with min_generations completions first, then allocate the rest of the round's "
            "budget from the fresh results (a second generation pass per round)."
        },
    )
    zero_variance_groups: str = field(
        default="keep",
        metadata={
            "help": "Groups whose completions are all rewarded alike: 'keep', 'drop' (out of the loss and its "
            "normalisation) or 'rescue' (with two_phase_rounds: more completions in phase 2).",
            "choices": list(ZERO_VARIANCE_MODES),
        },
    )
    max_refill_phases: int = field(
        default=8,
        metadata={
            "help": "With zero_variance_groups='refill': the most generation phases of replacement prompts a round may "
            "add; past it the round trains on the rows with spread it has."
        },
    )
    skip_settled_prompts: bool = field(
        default=False,
        metadata={
            "help": "Skip, before generation, prompts whose latest groups were all solved or all failed, with a "
            "probability that rises with their run of such groups (GRESO, arXiv 2506.02177)."
        },
    )
    skip_target_zero_spread: float = field(
        default=0.25,
        metadata={"help": "Share of generated groups without spread that skip_settled_prompts tunes towards."},
    )
    max_skips_in_a_row: int = field(
        default=3,
        metadata={"help": "With skip_settled_prompts: a prompt skipped this many visits in a row is generated next."},
    )
    skip_rule: str = field(
        default="greso",
        metadata={
            "help": "Which prompts skip_settled_prompts skips: 'greso' (runs of flat groups, GRESO's self-tuned "
            "probabilities) or 'spread_chance' (a prompt whose posterior chance of a group with spread is below "
            "skip_min_spread_chance).",
            "choices": list(SKIP_RULES),
        },
    )
    skip_min_spread_chance: float = field(
        default=0.5,
        metadata={
            "help": "With skip_rule='spread_chance': skip a prompt whose chance of a group with spread is below this."
        },
    )
    skip_prior: str = field(
        default="population",
        metadata={
            "help": "With skip_rule='spread_chance': fit a prompt's pass-rate prior to every prompt seen "
            "('population'; unseen prompts are never skipped) or to its neighbourhood's seen prompts "
            "('neighbourhood', needs pass_rate_neighbour_column; unseen prompts are skipped by their neighbourhood's "
            "chance of spread).",
            "choices": list(SKIP_PRIORS),
        },
    )
    group_weighting: str = field(
        default="row",
        metadata={
            "help": "How much a prompt's group weighs in the loss: 'row' (each completion counts once, released code) "
            "or 'prompt' (advantages scaled by mean group size / group size, so every prompt weighs one GRPO group).",
            "choices": list(GROUP_WEIGHTINGS),
        },
    )
    log_allocations: bool = field(
        default=True,
        metadata={
            "help": "Write each round's allocation (prompts, pass rates, allocator state, group sizes, successes) as "
            "one JSON line to <output_dir>/coba_rounds.jsonl."
        },
    )
    coba_kappa: float = field(
        default=11.0,
        metadata={"help": "Concentration kappa = alpha + beta of the Beta value density."},
    )
    coba_window: int = field(
        default=1,
        metadata={"help": "Number of past rounds whose failure rates are averaged into the capability estimate."},
    )
    coba_gamma: float = field(
        default=10.0,
        metadata={"help": "Slope gamma of the sigmoid applied to smoothed failure rates <= 0.5."},
    )
    coba_tau: float | None = field(
        default=None,
        metadata={
            "help": "Saturation scale tau of the value function; None = adaptive (3 to 12, from the pass rates)."
        },
    )
    coba_heap_fraction: float | None = field(
        default=None,
        metadata={
            "help": "Share of the budget above min_generations handed out by the heap greedy; None = released rule "
            "(0.6 to 0.8)."
        },
    )
    coba_hard_threshold: float = field(
        default=0.05,
        metadata={"help": "Pass rates below this are 'very hard' and skip the heap."},
    )
    coba_easy_threshold: float = field(
        default=0.99,
        metadata={"help": "Pass rates above this are 'very easy' and skip the heap."},
    )
    pass_rate_window: int = field(
        default=1,
        metadata={"help": "Number of past appearances of a prompt pooled into its pass rate."},
    )
    pass_rate_prior_strength: float = field(
        default=0.0,
        metadata={
            "help": "Pseudo-count s of a Beta prior on each prompt's pass rate, (successes + s * m) / (rollouts + s) "
            "with m the prompt's offline prior pass rate, else the latest round's mean; 0 = released empirical rate."
        },
    )
    success_reward_func: list[str] | None = field(
        default=None,
        metadata={
            "help": "Name(s) of the reward function(s) whose value defines a success (the first that scored a "
            "completion); None = the first reward function."
        },
    )
    success_threshold: float = field(
        default=1.0,
        metadata={"help": "A completion is a success when the success reward is >= this value (NaN: not counted)."},
    )
    prompt_id_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column with a stable prompt id; None = the dataset row index."},
    )
    prior_pass_rate_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column with an offline pass-rate estimate used for prompts without history."},
    )
    pass_rate_neighbour_column: str | None = field(
        default=None,
        metadata={
            "help": "Dataset column grouping prompts into neighbourhoods (level, topic, source): a prompt's prior pass "
            "rate is its neighbourhood's current mean pass rate (for unseen prompts, and the shrinkage target of "
            "pass_rate_prior_strength)."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        self._check_training_values()
        if self.budget_allocator not in ALLOCATORS:
            raise ValueError(f"budget_allocator ({self.budget_allocator!r}) must be one of {list(ALLOCATORS)}.")
        if self.min_generations < 1:
            raise ValueError(f"min_generations ({self.min_generations}) must be at least 1.")
        if self.min_generations > self.max_generations:
            raise ValueError(
                f"min_generations ({self.min_generations}) must not exceed max_generations ({self.max_generations}); "
                "lower min_generations or raise max_generations."
            )
        if self.max_generations < self.num_generations:
            raise ValueError(
                f"max_generations ({self.max_generations}) must be at least num_generations ({self.num_generations}), "
                "the mean group size, or the round's budget cannot be spent; raise max_generations."
            )
        if self.min_generations > self.num_generations:
            raise ValueError(
                f"min_generations ({self.min_generations}) must not exceed num_generations ({self.num_generations}), "
                "the mean group size, or every prompt cannot get its minimum; lower min_generations."
            )
        if self.zero_variance_groups not in ZERO_VARIANCE_MODES:
            raise ValueError(
                f"zero_variance_groups ({self.zero_variance_groups!r}) must be one of {list(ZERO_VARIANCE_MODES)}."
            )
        if self.zero_variance_groups == "rescue" and not self.two_phase_rounds:
            raise ValueError(
                "zero_variance_groups='rescue' gives extra completions in the second phase of a round: set "
                "two_phase_rounds=True, or use 'keep' or 'drop'."
            )
        if self.zero_variance_groups == "rescue" and self.min_generations < 2:
            raise ValueError(
                f"zero_variance_groups='rescue' with min_generations ({self.min_generations}): a screening of one "
                "completion per prompt finds every group all-equal, so every group would be rescued. Set "
                "min_generations to 2 or more."
            )
        if self.max_refill_phases < 0:
            raise ValueError(
                f"max_refill_phases ({self.max_refill_phases}) must be 0 or more (0: a refill round never adds phases)."
            )
        if not (math.isfinite(self.skip_target_zero_spread) and 0 < self.skip_target_zero_spread < 1):
            raise ValueError(
                f"skip_target_zero_spread ({self.skip_target_zero_spread}) must be a share strictly between 0 and 1, "
                "e.g. 0.25 (GRESO's)."
            )
        if self.skip_rule not in SKIP_RULES:
            raise ValueError(f"skip_rule ({self.skip_rule!r}) must be one of {list(SKIP_RULES)}.")
        if self.skip_rule != "greso" and not self.skip_settled_prompts:
            raise ValueError(
                f"skip_rule is {self.skip_rule!r} but skip_settled_prompts is False, so no prompt would be skipped. "
                "Set skip_settled_prompts=True (--skip_settled_prompts true) to skip by this rule, or leave skip_rule "
                "at its default."
            )
        if self.skip_prior not in SKIP_PRIORS:
            raise ValueError(f"skip_prior ({self.skip_prior!r}) must be one of {list(SKIP_PRIORS)}.")
        if self.skip_prior != "population" and self.skip_rule != "spread_chance":
            raise ValueError(
                f"skip_prior is {self.skip_prior!r} but skip_rule is {self.skip_rule!r}: the prior is that of the "
                "chance of spread. Set skip_rule='spread_chance' (--skip_rule spread_chance), or leave skip_prior at "
                "its default."
            )
        if self.skip_prior == "neighbourhood" and self.pass_rate_neighbour_column is None:
            raise ValueError(
                "skip_prior is 'neighbourhood' but pass_rate_neighbour_column is None, so no prompt has a "
                "neighbourhood. Name the dataset column that groups your prompts (--pass_rate_neighbour_column level), "
                "or set skip_prior='population'."
            )
        if not (math.isfinite(self.skip_min_spread_chance) and 0 < self.skip_min_spread_chance < 1):
            raise ValueError(
                f"skip_min_spread_chance ({self.skip_min_spread_chance}) must be a chance strictly between 0 and 1, "
                "e.g. 0.5."
            )
        if self.max_skips_in_a_row < 1:
            raise ValueError(
                f"max_skips_in_a_row ({self.max_skips_in_a_row}) must be at least 1; set skip_settled_prompts=False "
                "to skip nothing."
            )
        if self.group_weighting not in GROUP_WEIGHTINGS:
            raise ValueError(
                f"group_weighting ({self.group_weighting!r}) must be one of {list(GROUP_WEIGHTINGS)}: 'row' weighs every "
                "completion once, 'prompt' weighs every prompt's group like one GRPO group."
            )
        if self.pass_rate_window < 1:
            raise ValueError(f"pass_rate_window ({self.pass_rate_window}) must be at least 1.")
        if not (math.isfinite(self.pass_rate_prior_strength) and self.pass_rate_prior_strength >= 0):
            raise ValueError(
                f"pass_rate_prior_strength ({self.pass_rate_prior_strength}) must be a finite number >= 0 "
                "(0 = the released empirical pass rate)."
            )
        if not math.isfinite(self.success_threshold):
            raise ValueError(f"success_threshold ({self.success_threshold}) must be a finite number.")
        if self.coba_hard_threshold > self.coba_easy_threshold:  # the allocator's message names only the first
            fields = self.__dataclass_fields__
            raise ValueError(
                f"coba_hard_threshold ({self.coba_hard_threshold}) must not exceed coba_easy_threshold "
                f"({self.coba_easy_threshold}): lower --coba_hard_threshold (default "
                f"{fields['coba_hard_threshold'].default}) or raise --coba_easy_threshold (default "
                f"{fields['coba_easy_threshold'].default})."
            )
        try:
            self.build_allocator()
        except ValueError as error:  # the allocators name their own arguments: say which field sets each
            argument = str(error).split(" ", 1)[0]
            name = ALLOCATOR_FIELDS.get(argument)
            if name is None:
                raise
            default = self.__dataclass_fields__[name].default
            fix = f"Leave --{name} unset" if default is None else f"Pass --{name} {default}"
            raise ValueError(
                f"{name} ({getattr(self, name)}): {error} {fix} (the default) or give it a value in that range."
            ) from None

    def _check_training_values(self) -> None:
        """TRL and transformers values they accept at construction that would fail (or train nothing) only once
        training has started: torch's optimizer at the first step, generation at the first round."""
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation"):
            if getattr(self, name) < 1:  # a round of 0 rows divides by zero when the sampler is built
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be at least 1: a round of no rows cannot be trained. Pass "
                    f"--{name} 1 or more."
                )
        if self.num_iterations < 1:  # TRL then trains on no round, silently
            raise ValueError(
                f"num_iterations ({self.num_iterations}) must be at least 1 (the optimizer passes over each round's "
                "rows): 0 trains nothing. Pass --num_iterations 1 (TRL's default)."
            )
        if self.top_k < 0:
            raise ValueError(
                f"top_k ({self.top_k}) must be >= 0: transformers' generation refuses a negative top_k at the first "
                "round. Set --top_k 0 to consider every token (TRL's default; it disables top-k for vLLM too)."
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(
                f"learning_rate ({self.learning_rate}) must be a positive, finite number: torch's optimizers refuse a "
                "negative one when training starts, and 0 never changes the model. Pass a positive learning_rate "
                "(--learning_rate 1e-6, the paper's; the CPU demo uses 3e-4)."
            )
        if self.max_steps <= 0 and not self.num_train_epochs > 0:
            raise ValueError(
                f"num_train_epochs ({self.num_train_epochs}) with max_steps ({self.max_steps}) trains no step. Pass a "
                "positive num_train_epochs (--num_train_epochs 1) or a positive max_steps (--max_steps 100)."
            )
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(
                f"temperature ({self.temperature}) must be a positive, finite number: transformers refuses to sample at "
                "0 when the first round generates, and greedy decoding (vLLM's 0) makes every completion of a group "
                "identical, so every advantage is 0. Pass a positive temperature (--temperature 1.0, the paper's)."
            )
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(
                f"max_completion_length ({self.max_completion_length}) must be at least 1: generation refuses to "
                "produce no token at the first round. Pass a positive length (--max_completion_length 512, TRL's "
                "default)."
            )
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError(
                f"repetition_penalty ({self.repetition_penalty}) must be a positive, finite number (1.0 = none), or "
                "generation fails at the first round. Pass --repetition_penalty 1.0."
            )

    @property
    def prompts_per_round(self) -> int:
        """M, the distinct prompts of a generation round: `generation_batch_size / num_generations`, GRPO's prompts
        per round (each gets `num_generations` completions on average)."""
        return self.generation_batch_size // self.num_generations

    def build_pass_rate_history(self):
        """The per-prompt pass-rate estimator these fields describe (a `coba_trl.allocation.PassRateHistory`)."""
        from coba_trl.allocation import PassRateHistory

        return PassRateHistory(window=self.pass_rate_window, prior_strength=self.pass_rate_prior_strength)

    def build_allocator(self, name: str | None = None):
        """The allocator these fields describe (a `coba_trl.allocation` object), or the allocator `name` with these
        fields' bounds and parameters; raises `ValueError` on bad values."""
        from coba_trl.allocation import build_allocator

        return build_allocator(
            name or self.budget_allocator,
            min_budget=self.min_generations,
            max_budget=self.max_generations,
            kappa=self.coba_kappa,
            window=self.coba_window,
            gamma=self.coba_gamma,
            tau=self.coba_tau,
            heap_fraction=self.coba_heap_fraction,
            hard_threshold=self.coba_hard_threshold,
            easy_threshold=self.coba_easy_threshold,
        )


def coba_field_names() -> list[str]:
    """The fields `CoBAConfig` adds to TRL's `GRPOConfig`, in declaration order."""
    inherited = {f.name for f in fields(_GRPOConfig)}
    return [f.name for f in fields(CoBAConfig) if f.name not in inherited]
