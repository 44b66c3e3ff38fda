"""`CoBAGRPOTrainer`: TRL's GRPOTrainer with a per-prompt number of generations (CoBA-RL, arXiv 2602.03048).

The trainer is glue around TRL's own methods (trl-seams.md, "A seam strategy that works"); it never copies them:
1. the sampler yields each round's *distinct* prompts (`generation_batch_size / num_generations` per round);
2. `_generate_and_score_completions` gathers them, lets the allocator on process 0 choose a group size per prompt,
   broadcasts it, expands every prompt into its group of rows and deals the rows evenly over the processes
   (`coba_trl.grouping`), then runs TRL's method with `num_generations = 1`, so every backend (transformers,
   vLLM colocate, vLLM server) makes one completion per row;
3. the rewards TRL gathers are captured in `_calculate_rewards`, the advantages are recomputed per variable-size
   group (`coba_trl.advantages`), and the pass-rate history p_i and the capability F_t are updated (algorithm.md 2-3).
"""

from __future__ import annotations

import json
import math
import os
import textwrap
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate.logging import get_logger
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from coba_trl.advantages import group_advantages, zero_std_group_fraction
from coba_trl.allocation import PassRateHistory
from coba_trl.compat import check_trl_compatibility
from coba_trl.config import CoBAConfig
from coba_trl.grouping import deal_groups, expected_length_weight
from coba_trl.telemetry import budget_metrics
from coba_trl.validation import check_dataset, check_features, check_round_layout, check_success_reward

check_trl_compatibility()

logger = get_logger(__name__)

ROW_INDEX_COLUMN = "_coba_row_index"
STATE_FILE = "coba_state.json"


@dataclass
class RoundPlan:
    """One generation round: the distinct prompts, their group sizes, and the rows of every process."""

    prompt_ids: list
    group_sizes: np.ndarray
    global_group_ids: np.ndarray  # group id of each row, in the order TRL gathers rows (process 0's rows first)
    local_rows: list[dict]


class CoBAGRPOTrainer(GRPOTrainer):
    """
    [`~trl.GRPOTrainer`] whose prompts get different numbers of completions, chosen each generation round by CoBA-RL
    (capability-oriented budget allocation, arXiv 2602.03048), Knapsack-RL or a uniform split (plain GRPO).

    Takes the same arguments as [`~trl.GRPOTrainer`], with `args` a [`CoBAConfig`]; `train_dataset` must be a
    map-style [`~datasets.Dataset`]. `rollout_func` and `environment_factory` are not supported. The allocator and the
    pass-rate history are public (`trainer.allocator`, `trainer.pass_rate_history`) and saved in every checkpoint.

    Example:

    ```python
    >>> from coba_trl import CoBAConfig, CoBAGRPOTrainer
    >>> args = CoBAConfig(output_dir="out", num_generations=16, max_generations=128)
    >>> trainer = CoBAGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=accuracy_reward, args=args,
    ...                           train_dataset=dataset)
    >>> trainer.train()
    ```
    """

    _tag_names = ["trl", "grpo", "coba-rl"]
    _name = "CoBA-GRPO"
    _paper = {
        "title": "CoBA-RL: Capability-Oriented Budget Allocation for Reinforcement Learning in LLMs",
        "id": "2602.03048",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{yao2026cobarl,
                title        = {{CoBA-RL: Capability-Oriented Budget Allocation for Reinforcement Learning in LLMs}},
                author       = {Zhiyuan Yao and Yi-Kai Zhang and Yuxin Chen and Yueqing Sun and Zishan Xu and Yu Yang and Tianhao Hu and Qi Gu and Hui Su and Xunliang Cai},
                year         = 2026,
                eprint       = {arXiv:2602.03048},
            }"""),
    }

    def __init__(self, model, reward_funcs=None, args: CoBAConfig | None = None, train_dataset=None, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "") or "model"
            args = CoBAConfig(f"{name.split('/')[-1]}-CoBA")
        if not isinstance(args, CoBAConfig):
            raise ValueError(
                f"args must be a CoBAConfig, got {type(args).__name__}. Build it with "
                "`CoBAConfig(**your_grpo_config.to_dict())` or pass the CoBA fields to CoBAConfig directly."
            )
        check_features(kwargs.get("rollout_func"), kwargs.get("environment_factory"))
        check_dataset(train_dataset, args.prompt_id_column, args.prior_pass_rate_column)
        self._prompts_per_round = check_round_layout(
            args.generation_batch_size, args.num_generations, args.world_size, args.steps_per_generation
        )
        self._id_column = args.prompt_id_column or ROW_INDEX_COLUMN
        if args.prompt_id_column is None:
            train_dataset = train_dataset.add_column(ROW_INDEX_COLUMN, list(range(len(train_dataset))))
        self._coba_columns = [c for c in (self._id_column, args.prior_pass_rate_column) if c is not None]
        super().__init__(model, reward_funcs, args, train_dataset, **kwargs)
        self._success_index = check_success_reward(args.success_reward_func, self.reward_func_names)
        self.allocator = args.build_allocator()
        self.pass_rate_history = PassRateHistory(window=args.pass_rate_window)
        self._captured_rewards = None

    def _set_signature_columns_if_needed(self):
        # Keep the prompt-id and prior columns when `remove_unused_columns=True`.
        super()._set_signature_columns_if_needed()
        self._signature_columns += [c for c in self._coba_columns if c not in self._signature_columns]

    def _get_train_sampler(self, dataset=None):
        # Distinct prompts per round (mini_repeat_count 1): the allocator sets the repeats. repeat_count stays TRL's,
        # so the Trainer's step counting and the reuse of a round over steps_per_generation * num_iterations hold.
        return RepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=1,
            batch_size=self._prompts_per_round,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def get_train_dataloader(self):
        # Each process loads its share of the round's distinct prompts.
        return self._get_dataloader(
            dataset=self.train_dataset,
            description="Training",
            batch_size=self._prompts_per_round // self.accelerator.num_processes,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the rewards gathered from all processes (N_global, num_funcs); keep them for the group advantages.
        self._captured_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._captured_rewards

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # evaluation stays on TRL's fixed-group path
            return super()._generate_and_score_completions(inputs)
        plan = self._plan_round(inputs)
        mean_group_size = self.num_generations
        self.num_generations = 1  # one completion per expanded row, in every generation backend
        try:
            output = super()._generate_and_score_completions(plan.local_rows)
        finally:
            self.num_generations = mean_group_size
        rewards = self._captured_rewards
        group_ids = torch.as_tensor(plan.global_group_ids, device=rewards.device)
        num_groups = len(plan.group_sizes)
        advantages = group_advantages(
            rewards, group_ids, num_groups, self.reward_weights, self.scale_rewards, self.multi_objective_aggregation
        )
        rows = len(plan.local_rows)
        start = self.accelerator.process_index * rows
        output["advantages"] = advantages[start : start + rows]
        self._replace_stock_metrics(rewards, advantages, group_ids, num_groups)
        self._observe_round(rewards, plan)
        return output

    def _plan_round(self, local_prompts: list[dict]) -> RoundPlan:
        """Gather the round's prompts, allocate on process 0, broadcast, expand into groups and deal the rows."""
        prompts = gather_object(local_prompts)
        prompt_ids = [row[self._id_column] for row in prompts]
        payload = [self._allocate(prompts, prompt_ids) if self.accelerator.is_main_process else None]
        broadcast_object_list(payload, from_process=0)
        group_sizes, pass_rates, metrics = payload[0]
        total = self.args.generation_batch_size
        if group_sizes.shape != (len(prompts),) or group_sizes.sum() != total or group_sizes.min() < 1:
            raise ValueError(  # checked on every process, after the broadcast, so all of them stop
                f"The allocator {type(self.allocator).__name__} returned group sizes {group_sizes.tolist()}; expected "
                f"{len(prompts)} sizes >= 1 summing to generation_batch_size ({total})."
            )
        dealt = deal_groups(group_sizes, self.accelerator.num_processes, expected_length_weight(pass_rates))
        local_rows = [
            {key: value for key, value in prompts[group].items() if key != ROW_INDEX_COLUMN}
            for group in dealt[self.accelerator.process_index]
        ]
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        return RoundPlan(prompt_ids, group_sizes, np.concatenate(dealt), local_rows)

    def _allocate(self, prompts: list[dict], prompt_ids: list) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """Group sizes for the round's prompts from their pass rates (history, else prior, else unseen)."""
        start = time.perf_counter()
        prior = None
        if self.args.prior_pass_rate_column is not None:
            column = self.args.prior_pass_rate_column
            prior = np.array([np.nan if row[column] is None else float(row[column]) for row in prompts])
        pass_rates = self.pass_rate_history.pass_rates(prompt_ids, prior=prior)
        group_sizes = np.asarray(self.allocator.allocate(pass_rates, self.args.generation_batch_size), dtype=np.int64)
        elapsed = time.perf_counter() - start
        metrics = {
            f"coba/{key}": float(value)
            for key, value in self.allocator.metrics().items()
            if value is not None and math.isfinite(value) and key not in ("budget_min", "budget_max")
        }  # budget min / max are logged with the mean below
        metrics.update(budget_metrics(group_sizes, pass_rates))
        metrics["coba/allocation_time"] = elapsed
        metrics["coba/prompts_with_history"] = float(len(self.pass_rate_history))
        return group_sizes, pass_rates, metrics

    def _replace_stock_metrics(self, rewards, advantages, group_ids, num_groups):
        # With num_generations = 1 the stock code saw groups of one: fix the zero-std fraction (over groups) and the
        # logged advantages (its own are all zero).
        self._metrics["train"]["frac_reward_zero_std"][-1] = zero_std_group_fraction(
            rewards, group_ids, num_groups, self.reward_weights
        )
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    def _observe_round(self, rewards: torch.Tensor, plan: RoundPlan) -> None:
        """Update the pass-rate history and the capability estimate from the round's gathered correctness.

        A completion succeeds when the success reward is >= `success_threshold` (NaN = failure). Every process sees
        the same gathered rewards, so every process updates identically.
        """
        scores = rewards[:, self._success_index].float().cpu().numpy()
        success = np.nan_to_num(scores, nan=-np.inf) >= self.args.success_threshold
        successes = np.bincount(plan.global_group_ids, weights=success, minlength=len(plan.group_sizes))
        merged: dict = {}  # a prompt id listed twice in a round (duplicate rows) is one appearance
        for prompt_id, wins, tries in zip(plan.prompt_ids, successes, plan.group_sizes, strict=True):
            previous = merged.get(prompt_id, (0, 0))
            merged[prompt_id] = (previous[0] + int(wins), previous[1] + int(tries))
        ids = list(merged)
        wins, tries = (np.array(column, dtype=np.int64) for column in zip(*merged.values(), strict=True))
        self.pass_rate_history.update(ids, wins, tries)
        self.allocator.observe(wins / tries)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            checkpoint = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            with open(os.path.join(checkpoint, STATE_FILE), "w") as f:
                json.dump(
                    {
                        "allocator": self.allocator.state_dict(),
                        "pass_rate_history": self.pass_rate_history.state_dict(),
                    },
                    f,
                )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            logger.warning(f"{path} not found: resuming with an empty pass-rate history and capability estimate.")
            return
        with open(path) as f:
            state = json.load(f)
        self.allocator.load_state_dict(state["allocator"])
        self.pass_rate_history.load_state_dict(state["pass_rate_history"])
