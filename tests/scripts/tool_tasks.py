"""Tasks solved with tool calls, for the environment, tool and rollout_func tests, and the script the two-process
tests launch.

The model's replies are scripted at the generation boundary (the model's `generate`), as TRL's own tool tests do: a
prompt "Task i" makes the model call `add(step=1)` until it has seen i % 3 tool results, then answer "Done". Each
rollout's environment counts its own calls, so a shared or reused-without-reset environment would count too many. The
tokenizer is the byte tokenizer with TRL's Qwen2.5 chat template, which renders and parses tool calls.

`torchrun --nproc_per_node 2 tests/scripts/tool_tasks.py OUT_DIR MODE` writes, per rank, what the reward and the
environments saw in each round to OUT_DIR/rank{R}.json (MODE: `environment`, `environments` or `tools`). With
TOOL_TASKS_VLLM_SERVER set (a server's base URL, on the model folder TOOL_TASKS_MODEL), it generates with that
vLLM server, the server's answers scripted the same way (`scripted_server`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402

from coba_trl.distributed import leave_multiprocess_cpu_run  # noqa: E402
from coba_trl.tiny import build_byte_tokenizer, build_tiny_qwen2  # noqa: E402

SCRIPTED_SIZES = [[1, 7], [5, 3], [2, 6]]  # two tasks per round, eight rollouts: unequal groups, unequal rounds
CALL = '<tool_call>\n{"name": "add", "arguments": {"step": 1}}\n</tool_call><|im_end|>'
ANSWER = "Done<|im_end|>"
TOOL_ARGS = dict(
    max_completion_length=256,
    bf16=False,
    use_cpu=True,
    report_to="none",
    logging_steps=1,
    save_strategy="no",
    learning_rate=1e-2,
    dataloader_num_workers=0,
    disable_tqdm=True,
    ddp_find_unused_parameters=False,
    log_allocations=True,
    shuffle_dataset=False,
)


def tool_tokenizer():
    """The byte tokenizer with TRL's shipped Qwen2.5 chat template (tool schemas, `<tool_call>` parsing)."""
    tokenizer = build_byte_tokenizer()
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer


def calls_wanted(task: int) -> int:
    return task % 3


def scripted_reply(text: str) -> str:
    """The model's next turn for a conversation rendered as `text`: another tool call until the task has its calls."""
    task = int(re.search(r"Task (\d+)", text).group(1))
    return CALL if text.count("<tool_response>") < calls_wanted(task) else ANSWER


def scripted_generate(tokenizer, batch_sizes: list):
    """A stand-in for `model.generate` that appends `scripted_reply` to every row; records each call's rows."""

    def generate(input_ids, **kwargs):
        batch_sizes.append(int(input_ids.shape[0]))
        texts = tokenizer.batch_decode(input_ids)
        replies = [tokenizer.encode(scripted_reply(text), add_special_tokens=False) for text in texts]
        width = max(len(reply) for reply in replies)
        padded = [reply + [tokenizer.pad_token_id] * (width - len(reply)) for reply in replies]
        return torch.cat([input_ids, torch.tensor(padded, device=input_ids.device)], dim=-1)

    return generate


class Record:
    """What one process saw, per generation round: the tasks each environment was reset with, the tasks of the
    completions that reached the reward with the tool results in each, and each environment's count of calls when it
    was scored."""

    def __init__(self):
        self.rounds, self.resets, self.rollout_calls = [], [], []

    def reward(self, completions, task, **kwargs):
        """A reward function that records the round (it returns 0, so it does not move any advantage)."""
        calls = [sum(message["role"] == "tool" for message in completion) for completion in completions]
        rewarded = [[int(t), n] for t, n in zip(task, calls, strict=True)]
        self.rounds.append(
            {"rewarded": [int(t) for t in task], "calls": rewarded, "resets": self.resets, "scored": []}
        )
        self.resets = []
        return [0.0] * len(completions)

    def rollout_func(self, prompts, trainer):
        """A rollout_func written for GRPOTrainer: it reads its first prompt, then answers each distinct prompt
        (every num_generations-th) num_generations times; records the group size of each call."""
        tokenizer = trainer.processing_class
        self.rollout_calls.append([len(prompts), trainer.num_generations, prompts[0][-1]["content"]])
        prompt_ids, completion_ids = [], []
        for prompt in prompts[:: trainer.num_generations]:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            for _ in range(trainer.num_generations):
                prompt_ids.append(ids)
                completion_ids.append(tokenizer.encode(ANSWER, add_special_tokens=False))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    def environment(self, name: str = "Adder"):
        """An environment class whose instances log to this record."""
        record = self

        class Adder:
            def reset(self, task, **row):
                self.task, self.total = int(task), 0
                record.resets.append([type(self).__name__, self.task])

            def add(self, step: int) -> int:
                """
                Add to the running total.

                Args:
                    step: The amount to add.

                Returns:
                    The new total.
                """
                self.total += step
                return self.total

            def get_reward(self) -> float:
                record.rounds[-1]["scored"].append([self.task, self.total])
                return float(self.total == calls_wanted(self.task) and self.total > 0)

        Adder.__name__ = Adder.__qualname__ = name
        return Adder


def add(step: int) -> int:
    """
    Add to a counter.

    Args:
        step: The amount to add.

    Returns:
        The amount.
    """
    return step


def task_dataset(num_tasks: int = 6, environments: list[str] | None = None) -> Dataset:
    prompts = [[{"role": "user", "content": f"Task {i}"}] for i in range(num_tasks)]
    columns = {"prompt": prompts, "task": list(range(num_tasks))}
    if environments is not None:
        columns["environment"] = [environments[i % len(environments)] for i in range(num_tasks)]
    return Dataset.from_dict(columns)


def scripted_server(client, tokenizer) -> None:
    """Script a vLLM client's answers as `scripted_generate` scripts the model's: the request still goes to the real
    server (weights synced, n completions per prompt), and each completion is then replaced by `scripted_reply`."""
    send = client.generate

    def generate(prompts, n=1, **kwargs):
        output = send(prompts, n=n, **kwargs)
        replies = [tokenizer.encode(scripted_reply(tokenizer.decode(p)), add_special_tokens=False) for p in prompts]
        output["completion_ids"] = [reply for reply in replies for _ in range(n)]
        output["logprobs"] = [[[0.0] for _ in ids] for ids in output["completion_ids"]]
        output["logprob_token_ids"] = [[[token] for token in ids] for ids in output["completion_ids"]]
        return output

    client.generate = generate


def build(out_dir: str, mode: str, num_processes: int = 1, scripted: bool = True, **overrides):
    """A CoBAGRPOTrainer on the scripted tasks; returns (trainer, record, generate batch sizes).

    `environment`: one environment class, whose `get_reward` defines success. `environments`: a dict of two, routed
    by the `environment` column, prompt ids by row index. `tools`: a plain tool function and no environment.
    `rollout_func`: `Record.rollout_func`, written for GRPOTrainer, and neither tools nor environments.
    """
    from coba_trl import CoBAConfig, CoBAGRPOTrainer

    tokenizer = tool_tokenizer()
    server_url = os.environ.get("TOOL_TASKS_VLLM_SERVER")  # a vLLM server on the model folder TOOL_TASKS_MODEL
    if server_url:
        overrides = dict(
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=server_url,
            vllm_importance_sampling_correction=False,  # the scripted completions are not the server's samples
            **overrides,
        )
        model = os.environ["TOOL_TASKS_MODEL"]
    else:
        model = build_tiny_qwen2(tokenizer, hidden_size=16, max_position_embeddings=2048)
    record, batch_sizes = Record(), []
    config = dict(TOOL_ARGS, per_device_train_batch_size=8 // num_processes, num_generations=4, max_steps=3)
    kwargs = {}
    if mode == "environment":
        config.update(prompt_id_column="task", success_reward_func="Adder")
        kwargs["environment_factory"] = record.environment()
        dataset = task_dataset()
    elif mode == "environments":
        kwargs["environment_factory"] = {"odd": record.environment("Odd"), "even": record.environment("Even")}
        dataset = task_dataset(environments=["even", "odd"])
    elif mode == "rollout_func":
        config.update(prompt_id_column="task")
        kwargs["rollout_func"] = record.rollout_func
        dataset = task_dataset()
    else:
        config.update(prompt_id_column="task")
        kwargs["tools"] = [add]
        dataset = task_dataset()
    args = CoBAConfig(output_dir=out_dir, **{**config, **overrides})
    trainer = CoBAGRPOTrainer(
        model, [record.reward], args=args, train_dataset=dataset, processing_class=tokenizer, **kwargs
    )
    if scripted:
        sizes = iter(SCRIPTED_SIZES)
        trainer.allocator.allocate = lambda pass_rates, total_budget: np.array(next(sizes))
    trainer.model.generate = scripted_generate(tokenizer, batch_sizes)
    if server_url:
        generate = trainer.vllm_generation.generate

        def record_rows(prompts, *args, **kwargs):
            batch_sizes.append(len(prompts))
            return generate(prompts, *args, **kwargs)

        trainer.vllm_generation.generate = record_rows
        if trainer.accelerator.is_main_process:
            scripted_server(trainer.vllm_generation.vllm_client, tokenizer)
    return trainer, record, batch_sizes


def launch_two_processes(out_dir: Path, mode: str, env: dict | None = None) -> list[dict]:
    """Run this script on two processes (torchrun, gloo) and return what each rank wrote."""
    from scripts.two_processes import run_ranks

    return run_ranks(Path(__file__), out_dir, mode, env=env, timeout=500)


def assert_two_processes_gave_every_row_its_rollout(ranks: list[dict], logged: list[dict], mode: str) -> None:
    """Per round, over both processes: each task's completions (each with its own task's tool results), resets and
    scored environments are its logged group size; the processes regenerated different numbers of rows."""
    from collections import Counter

    assert [entry["group_sizes"] for entry in logged] == SCRIPTED_SIZES
    for index, entry in enumerate(logged):
        planned = Counter(dict(zip(entry["prompt_ids"], entry["group_sizes"], strict=True)))
        rounds = [rank["rounds"][index] for rank in ranks]
        assert len(rounds[0]["rewarded"]) == len(rounds[1]["rewarded"]) == 4  # 8 rows dealt 4 + 4
        assert sum((Counter(r["rewarded"]) for r in rounds), Counter()) == planned
        assert all(calls == calls_wanted(task) for r in rounds for task, calls in r["calls"])  # its own completion
        if mode == "environment":
            assert sum((Counter(task for _, task in r["resets"]) for r in rounds), Counter()) == planned
            scored = [pair for r in rounds for pair in r["scored"]]
            assert len(scored) == 8 and all(total == calls_wanted(task) for task, total in scored)
            sizes = zip(entry["prompt_ids"], entry["group_sizes"], strict=True)
            assert entry["successes"] == [size if calls_wanted(task) else 0 for task, size in sizes]
    assert ranks[0]["batch_sizes"] != ranks[1]["batch_sizes"]  # each process regenerated its own rows' tool calls
    frequency = [
        [e["tools/call_frequency"] for e in rank["log_history"] if "tools/call_frequency" in e] for rank in ranks
    ]
    assert frequency[0] == frequency[1] and len(frequency[0]) == len(SCRIPTED_SIZES)


def main(out_dir: str, mode: str) -> None:
    trainer, record, batch_sizes = build(out_dir, mode, num_processes=int(os.environ.get("WORLD_SIZE", "1")))
    trainer.train()
    seen = {"rounds": record.rounds, "batch_sizes": batch_sizes, "log_history": trainer.state.log_history}
    seen["rollout_calls"] = record.rollout_calls
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(seen, f)
    # Leave as a multi-process CPU run should: a gloo worker thread can otherwise hold the process at exit.
    leave_multiprocess_cpu_run()


if __name__ == "__main__":
    main(*sys.argv[1:])
