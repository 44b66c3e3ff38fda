"""Two-process CoBA runs on real vLLM, launched by `tests/test_vllm_distributed.py` (torchrun, CPU, gloo).

    torchrun --standalone --nproc_per_node 2 tests/scripts/vllm_multi.py OUT MODEL_DIR colocate TENSOR_PARALLEL
    torchrun --standalone --nproc_per_node 2 tests/scripts/vllm_multi.py OUT MODEL_DIR server BASE_URL

Trains a one-phase, then a two-phase CoBA run (OUT/one-phase, OUT/two-phase) on one colocated engine per process
(or one per pair of processes with TENSOR_PARALLEL 2), or against the server at BASE_URL. The prompts carry prior
pass rates from 0.05 to 0.95, so CoBA's groups differ from the first round on. Each process writes
OUT/<run>/rank{R}.json: the group sizes it was told (per round), the completions per prompt its reward function
scored (per round, this process's rows only), TRL's importance-sampling ratio at every step and how far the weights
moved; process 0 writes the allocation log (OUT/<run>/coba_rounds.jsonl).

`counting_accuracy_reward` is the demo's reward for `examples/train_qwen.py --reward_funcs
tests.scripts.vllm_multi.counting_accuracy_reward`: it also appends, per call, the completions per prompt it scored
to $COBA_REWARD_COUNTS/rank{R}.jsonl.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PRIORS = [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 0.5]


def counting_accuracy_reward(completions, prompt_id, trainer_state, **kwargs):
    """The demo's DAPO accuracy reward, recording which prompts it scored how many completions of (module docstring)."""
    from coba_trl.rewards import dapo_accuracy_reward

    rank = os.environ.get("RANK", "0")
    record = {"global_step": trainer_state.global_step, "counts": Counter(prompt_id)}
    with open(os.path.join(os.environ["COBA_REWARD_COUNTS"], f"rank{rank}.jsonl"), "a") as handle:
        handle.write(json.dumps(record) + "\n")
    return dapo_accuracy_reward(completions, **kwargs)


def shared_engine_factory():
    """TRL's `vllm.LLM`, building one engine per model folder in this process, reused by every later trainer.

    The engine runs eagerly: compiling its graph costs each process about 40 s of CPU at start, and what two processes
    change (rows, tensor-parallel groups, the weight sync into sharded layers) does not depend on it; the demo's launch
    (`accelerate launch`) builds its engines as TRL does, compiled.

    A reused engine is seeded again as a new one seeds itself: the processes of a tensor-parallel group each sample
    from their own random state, which must agree (TRL seeds every engine of a group alike, after the trainer has
    seeded each process differently); a later trainer's per-process seed would otherwise set them apart.
    """
    import trl.generation.vllm_generation as vllm_generation
    from transformers import set_seed

    engines, build = {}, vllm_generation.LLM

    def shared_llm(**kwargs):
        if kwargs["model"] not in engines:
            engines[kwargs["model"]] = build(**{**kwargs, "max_num_seqs": 64, "enforce_eager": True})
        else:
            set_seed(kwargs["seed"])
        return engines[kwargs["model"]]

    vllm_generation.LLM = shared_llm


def train(out_dir: Path, model_dir: str, two_phase: bool, **vllm_args) -> dict:
    """One CoBA run on 2 processes (4 steps, one round each): what this process saw."""
    sys.path.insert(0, str(TESTS))
    from scripts.tiny_coba import prompt_dataset
    from scripts.vllm_runs import RoundWatch, coba_trainer, ratio_extremes

    dataset = prompt_dataset(8)
    dataset = dataset.add_column("prior", PRIORS[: len(dataset)])
    watch = RoundWatch()
    trainer = coba_trainer(
        model_dir,
        str(out_dir),
        watch,
        train_dataset=dataset,
        prior_pass_rate_column="prior",
        max_steps=4,
        two_phase_rounds=two_phase,
        **vllm_args,
    )
    embeddings = trainer.model.get_input_embeddings().weight
    before = embeddings.detach().clone()
    trainer.train()
    seen = {
        "planned": watch.planned,
        "rewarded": [dict(counts) for counts in watch.rewarded],
        "ratio": ratio_extremes(trainer),
        "global_step": trainer.state.global_step,
        "moved": float((embeddings.detach() - before).norm() / before.norm()),
    }
    with open(out_dir / f"rank{trainer.accelerator.process_index}.json", "w") as handle:
        json.dump(seen, handle)
    return trainer


def main(out_dir: str, model_dir: str, mode: str, target: str) -> None:
    if mode == "colocate":
        shared_engine_factory()
        vllm_args = dict(vllm_mode="colocate", vllm_tensor_parallel_size=int(target))
    else:
        vllm_args = dict(vllm_mode="server", vllm_server_base_url=target)
    for name, two_phase in (("one-phase", False), ("two-phase", True)):
        train(Path(out_dir) / name, model_dir, two_phase, **vllm_args)
    from coba_trl.distributed import leave_multiprocess_cpu_run

    leave_multiprocess_cpu_run()  # a gloo teardown bug: docs/training.md, "Teardown"


if __name__ == "__main__":
    main(*sys.argv[1:])
