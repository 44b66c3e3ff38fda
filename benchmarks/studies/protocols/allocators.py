"""Study 1: CoBA-RL vs Knapsack-RL vs GRPO at an equal rollout budget on the offline CPU arithmetic task.

Every arm starts from the same warm-started checkpoint, sees the same prompts in the same order for a given seed and
spends the same rollouts per generation round (except `grpo_2x`, GRPO with twice the rollouts per round for the same
number of rounds: the paper's data-efficiency comparison, docs/algorithm.md "Published results"). The protocol's numbers are fixed
here, independent of the demo's defaults (`coba_trl.demo.config`). Superseded by study 4 (docs/studies/warm_starts.md).
"""

from studies.declaration import Study

# The protocol (docs/studies/allocators.md, "Study 1: protocol"): fixed before any arm ran.
PROTOCOL: dict = {
    "hidden_size": 64,
    "num_layers": 2,
    "num_train_prompts": 256,
    "num_heldout": 500,
    "num_warm_start_problems": 20_000,
    "data_seed": 0,
    "warm_start_steps": 300,
    "warm_start_learning_rate": 3e-3,
    "warm_start_seed": 0,
    "prompts_per_round": 32,
    "num_generations": 8,  # G: base budget 32 x 8 = 256 rollouts per round
    "min_generations": 2,
    "max_generations": 32,
    "steps_per_generation": 2,
    "max_steps": 80,  # optimizer steps = 40 generation rounds, set from a timing-only pilot
    "learning_rate": 3e-4,
    "lr_scheduler_type": "cosine",
    "max_completion_length": 12,
    "temperature": 1.0,
    "eval_steps": 8,
    "conversion_samples": 16,  # sampled completions per training prompt, before and after RL
    "seeds": [0, 1, 2],
}

ARMS: dict[str, dict] = {
    "grpo": {"budget_allocator": "uniform"},
    "knapsack": {"budget_allocator": "knapsack"},
    "coba": {"budget_allocator": "coba"},
    "coba_paper": {
        "budget_allocator": "coba",
        "coba_hard_threshold": 0.0,
        "coba_easy_threshold": 1.0,
        "coba_heap_fraction": 1.0,
    },
    "coba_explore_first": {"budget_allocator": "coba", "explore_first": True},
    "grpo_2x": {"budget_allocator": "uniform", "budget_multiplier": 2},
}

# The smoke test's sizes (CI): a few steps of every arm, no docs.
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
    "seeds": [0],
}

STUDY = Study(
    name="allocators",
    title="Study 1 (CoBA vs Knapsack-RL vs GRPO)",
    label="Study 1",
    protocol=PROTOCOL,
    arms=ARMS,
    quick=QUICK,
    marker="results",
    plot_prefix="compare",
    output_dir="outputs/compare",
    comparisons=(
        *((arm, "grpo") for arm in ("knapsack", "coba", "coba_paper", "coba_explore_first")),
        ("coba", "knapsack"),
        ("coba_paper", "knapsack"),
        ("coba_paper", "coba"),
        ("coba_explore_first", "coba"),
    ),
)
