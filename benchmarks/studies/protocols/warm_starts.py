"""Study 4: CoBA, its weighting and its targeting against GRPO and Knapsack-RL over warm starts, in two F_t regimes.

Pre-registered in docs/studies/warm_starts.md ("Study 4: protocol"); this file is that protocol in code. Its units are
(warm-start seed, RL seed) pairs (`unit="run"`): the warm-start seed sets the tiny model's initialisation and the
order of its supervised batches, the RL seed the RL run's sampling; the report adds the re-analysis with warm starts
as units and Holm's correction. Regime `demo` is the CPU demo's configuration exactly
(`coba_trl.demo.config`: `DEMO_TRAINING_ARGS` and the `DemoArguments` defaults; a test keeps them equal), so that the
demo's single run is unit (0, 0) of that regime; regime `longer_warm_start` is the same with 600 warm-start steps
instead of 300, a stronger start whose F_t while allocating the pilot put below 0.5 (the demo's above it).
"""

from studies.declaration import Study

PROTOCOL: dict = {
    "description": "the CPU demo's configuration (300 warm-start steps; F_t while allocating above 0.5 in the pilot)",
    # The demo's task and tiny model (DemoArguments defaults; WARM_START_PROBLEMS; data seed = the demo's seed 0).
    "hidden_size": 64,
    "num_layers": 2,
    "num_train_prompts": 512,
    "num_heldout": 300,
    "num_warm_start_problems": 20_000,
    "data_seed": 0,
    "warm_start_steps": 300,
    "warm_start_learning_rate": 3e-3,
    "warm_start_threads": 1,  # the demo's single thread
    # The demo's RL run (DEMO_TRAINING_ARGS): 32 prompts x 8 = 256 rollouts per round, 100 steps = 50 rounds.
    "prompts_per_round": 32,
    "num_generations": 8,
    "min_generations": 2,
    "max_generations": 32,
    "steps_per_generation": 2,
    "max_steps": 100,
    "learning_rate": 3e-4,
    "lr_scheduler_type": "cosine",
    "max_completion_length": 12,
    "temperature": 1.0,
    "eval_steps": 10,
    "trainer": {"activation_checkpointing": False, "ddp_find_unused_parameters": False, "prompt_id_column": None},
    # Measurements: held-out greedy accuracy (curve and final) and avg@16 at temperature 1.0 after RL.
    "conversion_samples": 16,
    "conversion": False,  # no training-prompt conversion sampling (studies 1 and 2 only)
    # Units and analysis.
    "warm_start_seeds": [0, 1, 2],
    "seeds": [0, 1],
    "equivalence_margin": 0.02,
}

REGIMES: dict[str, dict] = {
    "demo": {},
    "longer_warm_start": {
        "description": "the demo's configuration with 600 warm-start steps (F_t while allocating below 0.5 in the "
        "pilot)",
        "warm_start_steps": 600,
    },
}

# Every arm: 256 rollouts per round for 50 rounds, 100 optimizer steps, no offline prior pass rates (epoch 1 is
# uniform in every arm, as in the demo and the released code).
ARMS: dict[str, dict] = {
    "grpo": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "coba": {"budget_allocator": "coba", "group_weighting": "row"},  # the released defaults
    "coba_prompt": {"budget_allocator": "coba", "group_weighting": "prompt"},
    # CoBA's group sizes of each round, handed to a random permutation of the round's prompts (studies/arms.py).
    "coba_shuffled": {"budget_allocator": "coba", "group_weighting": "row", "shuffled_group_sizes": True},
}

QUICK: dict = {
    "num_train_prompts": 16,
    "num_heldout": 20,
    "num_warm_start_problems": 200,
    "warm_start_steps": 3,
    "prompts_per_round": 4,
    "num_generations": 4,
    "max_generations": 8,
    "max_steps": 4,
    "eval_steps": 2,
    "conversion_samples": 2,
    "warm_start_seeds": [0, 1],
    "seeds": [0],
}

STUDY = Study(
    name="warm_starts",
    title="Study 4 (warm starts, weighting and targeting)",
    label="Study 4",
    protocol=PROTOCOL,
    arms=ARMS,
    quick=QUICK,
    marker="warm_starts",
    plot_prefix="warm_starts",
    output_dir="benchmarks/results/warm_starts",
    scratch_dir="outputs/warm_starts",
    comparisons=(
        ("knapsack", "grpo"),
        ("coba", "grpo"),
        ("coba_prompt", "grpo"),
        ("coba_shuffled", "grpo"),
        ("coba", "coba_prompt"),
        ("coba", "coba_shuffled"),
    ),
    analysis="intervals",
    unit="run",  # as pre-registered; the report adds the warm-start re-analysis
    regimes=REGIMES,
    record="compact",
)
