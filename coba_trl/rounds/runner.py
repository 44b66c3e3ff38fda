"""One generation round, run by itself: draw, screen, plan, generate, score, refill, choose and deal, record.

`RoundRunner.run` is the trainer's one call per round (docs/training.md, "How a round runs"). It calls back into the
trainer only to generate and score rows with TRL's own method (`GenerateRows`, once per generation phase) and does
the rest itself, identically on every process:

1. draw the round's M = `generation_batch_size / num_generations` prompts: the dataloader's shares gathered
   (padding dropped) or, when a round takes a variable number of prompts (refill, skipping), the source's cursor;
2. per generation batch: screen every prompt with `min_generations` rows (`two_phase_rounds`), plan the group sizes
   on process 0 (`coba_trl.rounds.plan`; a resumed round replays its saved plan), deal the rows over the processes
   (`coba_trl.rounds.grouping`), generate and score them over whole groups (`coba_trl.rounds.scoring`);
3. with `zero_variance_groups="refill"`, further batches of the cursor's next prompts until the round holds
   `generation_batch_size` rows from groups with spread or `max_refill_phases` were added, then the rows the loss
   trains on, dealt evenly over the processes with one batch normalisation over them (`coba_trl.rounds.refill`);
4. the round's metrics and warnings (`coba_trl.rounds.spending`), the pass-rate history, F_t and the skipper's
   observation, and the allocation-log record.

The runner holds what later rounds depend on (allocator, history, skipper, cursor, the round in progress, the
completions generated so far): `state_dict` / `load_state_dict` are what `coba_trl.checkpoint` saves and restores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
from accelerate.utils import gather_object

from coba_trl.allocation.neighbours import NeighbourhoodPrior, combined_prior
from coba_trl.distributed import shared_call
from coba_trl.rounds.batches import GenerationBatch, combined, round_record
from coba_trl.rounds.grouping import deal_groups, expand_rows, expected_length_weight
from coba_trl.rounds.log import RoundLog
from coba_trl.rounds.metrics import log_round
from coba_trl.rounds.plan import (
    RoundPlan,
    Screening,
    check_plan,
    encode_round,
    plan_round,
    prior_pass_rates,
    replayed_plan,
)
from coba_trl.rounds.refill import choose_rows, deal_chosen_rows, gather_round, replacement_count, rows_with_spread
from coba_trl.rounds.resume import ResumePoint, resume_point
from coba_trl.rounds.rollouts import RolloutGroups
from coba_trl.rounds.scoring import (
    Phase,
    Scoring,
    check_phase_rewards,
    observe_round,
    score_round,
    screen_round,
    success_signal_warning,
    unscored_groups_warning,
)
from coba_trl.rounds.skipping import SettledPromptSkipper, SpreadChanceSkipper
from coba_trl.rounds.source import check_same_prompts
from coba_trl.rounds.spending import Spending, spending_metrics

logger = logging.getLogger(__name__)

# The trainer's callback: generate one completion for each of this process's `rows` with TRL's own method and score
# it; `groups` says which group each row is in, `stay_awake` that another phase of the round follows. Returns TRL's
# batch for these rows and the rewards it gathered from all processes, (rows of every process, reward functions).
GenerateRows = Callable[[list[dict], RolloutGroups, bool], tuple[dict, torch.Tensor]]


class RoundRunner:
    """Runs the generation rounds of a `CoBAGRPOTrainer` (module docstring).

    Args:
        args: The run's `CoBAConfig`.
        source: Where the rounds' prompts come from (`coba_trl.rounds.source.round_source`).
        accelerator: The trainer's accelerator (process index and count, gathers).
        reward_func_names: The trainer's reward function names, for the warnings.
        success_indices: The success reward functions (`coba_trl.validation.check_success_reward`).
    """

    def __init__(self, args, source, accelerator, reward_func_names: list[str], success_indices: tuple[int, ...]):
        self.args, self.source, self.accelerator = args, source, accelerator
        self.prompts_per_round = args.prompts_per_round
        self.refill = args.zero_variance_groups == "refill"
        self.draws_prompts = self.refill or args.skip_settled_prompts  # a variable number of prompts per round
        self.allocator = args.build_allocator()
        self.history = args.build_pass_rate_history()
        self.neighbours = NeighbourhoodPrior() if args.pass_rate_neighbour_column is not None else None
        self.skipper = None
        if args.skip_settled_prompts and args.skip_rule == "spread_chance":
            neighbour_column = args.pass_rate_neighbour_column if args.skip_prior == "neighbourhood" else None
            self.skipper = SpreadChanceSkipper(
                args.num_generations, args.skip_min_spread_chance, args.max_skips_in_a_row, neighbour_column
            )
        elif args.skip_settled_prompts:
            self.skipper = SettledPromptSkipper(args.skip_target_zero_spread, args.max_skips_in_a_row, args.seed)
        self.log = RoundLog(args.output_dir) if args.log_allocations else None
        self.success_name = ", ".join(reward_func_names[index] for index in success_indices)
        self.reward_func_names = reward_func_names
        self.current_round: dict | None = None  # the plan of the round in progress, saved with every checkpoint
        self.replay_round: dict | None = None  # the plan of the round a resumed checkpoint was saved inside of
        self.spending = Spending()  # what the run generated and trained, for the end-of-run line and its warnings
        self.warned: set[str] = set()  # the warnings given, each once in the run (saved with every checkpoint)

    # -- one round -------------------------------------------------------------------------------------------------

    def run(
        self,
        inputs: list[dict],
        micro_step: int,
        global_step: int,
        scoring: Scoring,
        generate: GenerateRows,
        metrics: dict,
        logged_advantages,
    ) -> dict:
        """Run the round whose dataloader batch on this process is `inputs`; returns this process's rows for the
        loss. `metrics` and `logged_advantages` are TRL's `_metrics["train"]` and `_logs["advantages"]`."""
        args, processes = self.args, self.accelerator.num_processes
        start_epoch = self.source.epoch
        skipped = []  # per batch, the prompts skipped while drawing it
        if self.draws_prompts:
            prompts, prompt_ids, skipped_here = self.source.draw(self.prompts_per_round, self._skip)
            skipped.append(skipped_here)
        else:
            prompts = gather_object(inputs)[: self.prompts_per_round]  # gathered in sampler order: drop the padding
            prompt_ids = self.source.prompt_ids(micro_step, self.accelerator, inputs, prompts)
        batches = [self._batch(prompts, prompt_ids, args.generation_batch_size, scoring, generate)]
        self.current_round = encode_round(prompt_ids, batches[0].plan.group_sizes, batches[0].plan.pass_rates)
        while self.refill and len(batches) <= args.max_refill_phases:  # replace the groups without spread
            missing = args.generation_batch_size - sum(rows_with_spread(batch) for batch in batches)
            if missing <= 0:
                break
            screen_rows = args.min_generations if args.two_phase_rounds else 0
            count = replacement_count(missing, args.num_generations, processes, screen_rows)
            prompts, prompt_ids, skipped_here = self.source.draw(count, self._skip)
            skipped.append(skipped_here)
            batches.append(self._batch(prompts, prompt_ids, count * args.num_generations, scoring, generate))
        plan, scored, phases = combined(batches)
        chosen = None
        if self.refill:  # the rows with spread, dealt evenly over the processes
            chosen = choose_rows(batches, processes, args.generation_batch_size)
            gathered = gather_round(batches, scoring.pad_token_id, self.accelerator)
            advantages = chosen.round_advantages(phases, len(plan.group_sizes), scoring, scored.group_weights)
            gathered["advantages"] = advantages[chosen.source_rows]
            batch = deal_chosen_rows(gathered, chosen, self.accelerator.process_index, processes)
            dropped = int(scored.zero_spread.sum().item())
            scored = replace(scored, advantages=advantages, batch=batch, dropped_groups=dropped)
        log_round(metrics, logged_advantages, plan, scored, phases, scoring.reward_weights, self.reward_func_names)
        spent = spending_metrics(plan, scored, args.zero_variance_groups, chosen, len(batches) - 1)
        if self.draws_prompts:
            spent["coba/prompts_skipped"] = float(sum(len(batch) for batch in skipped))
        if self.skipper is not None:
            spent.update(self.skipper.metrics())
        for key, value in spent.items():
            metrics[key].append(value)
        self.spending.add(spent)
        self._warn(phases, plan, scored, scoring)
        if plan.observe:
            observe_round(self.history, self.allocator, plan, scored)
            if self.skipper is not None:  # GRESO's tunes in rounds that start in the second epoch or later
                flat = scored.zero_spread.cpu().numpy()
                self.skipper.observe_round(plan.prompt_ids, flat, scored.successes, scored.scored, start_epoch > 0)
            if self.log is not None:
                record = round_record(batches, args.group_weighting, skipped, chosen, self.draws_prompts, processes)
                record = {"micro_step": micro_step, "global_step": global_step, **record}
                shared_call(lambda: self.log.write(record), self.accelerator)
        return scored.batch

    def _skip(self, prompt_id, row: dict) -> bool:
        return self.skipper is not None and self.skipper.visit(prompt_id, row)

    def _batch(
        self, prompts: list[dict], prompt_ids: list, budget: int, scoring: Scoring, generate: GenerateRows
    ) -> GenerationBatch:
        """A batch of the round: screen (two phases), plan `budget` completions, generate and score them."""
        args, phases, screening = self.args, [], None
        if args.two_phase_rounds:  # phase 1: min_generations completions for every prompt
            screen_sizes = np.full(len(prompts), args.min_generations)
            phases.append(self._phase(prompts, screen_sizes, None, True, generate))
            screening = screen_round(phases[0], scoring, len(prompts), args.min_generations)
        plan = self.plan(prompts, prompt_ids, screening, budget)
        if plan.remaining.sum() > 0:  # a refill batch may follow: a sleeping vLLM engine then stays awake
            phases.append(self._phase(prompts, plan.remaining, plan.pass_rates, self.refill, generate))
        rank, processes = self.accelerator.process_index, self.accelerator.num_processes
        scored = score_round(plan, phases, scoring, rank, processes, lambda n: self.accelerator.gather(n).sum())
        return GenerationBatch(plan, phases, scored)

    def plan(self, prompts: list[dict], prompt_ids: list, screening: Screening | None, budget: int) -> RoundPlan:
        """The plan of a batch of `budget` completions: a resumed round's saved one, else process 0's allocation
        (from the pass-rate history, the prompts' priors and the screening), shared with every process, once every
        process is found to hold process 0's prompts."""
        check_same_prompts(prompt_ids, self.accelerator)
        if self.neighbours is not None:  # on every process, so the map is the same everywhere
            column = self.args.pass_rate_neighbour_column
            self.neighbours.register(prompt_ids, [row[column] for row in prompts], column)
        plan, self.replay_round = replayed_plan(self.replay_round, prompt_ids, screening), None
        if plan is None:
            plan = shared_call(lambda: self._allocate(prompts, prompt_ids, screening, budget), self.accelerator)
        check_plan(plan, type(self.allocator).__name__, len(prompts), budget)
        return plan

    def _allocate(self, prompts: list[dict], prompt_ids: list, screening: Screening | None, budget: int) -> RoundPlan:
        args = self.args
        prior = prior_pass_rates(prompts, args.prior_pass_rate_column)
        if self.neighbours is not None:
            prior = combined_prior(prior, self.neighbours.prior(self.history, prompt_ids))
        rescue = args.zero_variance_groups == "rescue"
        return plan_round(
            prompt_ids, self.allocator, self.history, budget, args.max_generations, prior, screening, rescue
        )

    def _phase(
        self,
        prompts: list[dict],
        group_sizes: np.ndarray,
        pass_rates: np.ndarray | None,
        stay_awake: bool,
        generate: GenerateRows,
    ) -> Phase:
        """Deal the rows of `group_sizes` over the processes and generate and score this process's through TRL."""
        weights = None if pass_rates is None else expected_length_weight(pass_rates)
        rank = self.accelerator.process_index
        dealt = deal_groups(group_sizes, self.accelerator.num_processes, weights)
        local_rows = expand_rows(prompts, dealt[rank])
        groups = RolloutGroups(dealt[rank].tolist(), group_sizes.tolist(), inputs=local_rows)
        output, rewards = generate(local_rows, groups, stay_awake)
        group_ids = np.concatenate(dealt)
        check_phase_rewards(rewards, len(group_ids), len(self.reward_func_names))
        return Phase(output, rewards, group_ids)

    def _warn(self, phases: list[Phase], plan: RoundPlan, scored, scoring: Scoring) -> None:
        """Each warning once in the run (a resumed run included), in the first round it applies to."""
        field = self.args.success_reward_func
        checks = (
            ("signal", success_signal_warning, (phases, scoring, self.success_name, field)),
            ("unscored", unscored_groups_warning, (scored, plan.prompt_ids, self.success_name, field)),
            ("runaway", self.spending.runaway_warning, (self.refill, self.args.max_refill_phases, self.success_name)),
        )
        for kind, check, check_args in checks:
            if kind not in self.warned and (message := check(*check_args)) is not None:
                logger.warning(message)
                self.warned.add(kind)

    # -- state -----------------------------------------------------------------------------------------------------

    def start_log(self, resume_global_step: int | None = None) -> None:
        """Start the allocation log: a fresh file, or one that keeps the rounds before `resume_global_step`."""
        if self.log is not None:
            shared_call(lambda: self.log.start(resume_global_step=resume_global_step), self.accelerator)

    def resume(
        self, checkpoint: str, state: dict | None, saved_row_ranks: set[int], layout: dict, global_step: int
    ) -> ResumePoint:
        """Continue from `checkpoint`, whose CoBA state is `state` (None: none saved) and which holds rows of the
        round in progress for the processes `saved_row_ranks`, in a run of batch `layout` after `global_step`
        optimizer steps. Returns where TRL's micro-step counter continues and whether the saved rows are trained
        (`coba_trl.rounds.resume`)."""
        resumed_at = self.source.fast_forward_micro_step(global_step, layout["gradient_accumulation_steps"])
        point = resume_point(checkpoint, state, layout, global_step, resumed_at, saved_row_ranks, self.draws_prompts)
        if state is not None:
            self.load_state_dict(state)
        self.replay_round = point.replay_round
        self.start_log(resume_global_step=point.log_until)  # keeps the rounds that started before the checkpoint
        return point

    def state_dict(self) -> dict:
        """What the next rounds depend on, as plain JSON (`coba_trl.checkpoint` writes it)."""
        state = {
            "allocator": self.allocator.state_dict(),
            "pass_rate_history": self.history.state_dict(),
            "round": self.current_round,
            "spending": self.spending.state_dict(),
            "warned": sorted(self.warned),
        }
        if self.draws_prompts:
            state["cursor"] = self.source.cursor_state()
        if self.skipper is not None:
            state["skipper"] = self.skipper.state_dict()
        if self.neighbours is not None:
            state["neighbourhoods"] = self.neighbours.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.allocator.load_state_dict(state["allocator"])
        self.history.load_state_dict(state["pass_rate_history"])
        self.current_round = state.get("round")
        self.spending.load_state_dict(state.get("spending"), state.get("rollouts_generated", 0))
        self.warned = set(state.get("warned", []))
        if (state.get("spending") or {}).get("warned"):  # a checkpoint of an earlier coba-trl
            self.warned.add("runaway")
        if self.draws_prompts and "cursor" in state:
            self.source.restore_cursor(state["cursor"])
        if self.skipper is not None and "skipper" in state:
            self.skipper.load_state_dict(state["skipper"])
        if self.neighbours is not None and "neighbourhoods" in state:
            self.neighbours.load_state_dict(state["neighbourhoods"])
