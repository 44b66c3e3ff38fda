"""Tasks solved with tool calls, for the environment, tool and rollout_func tests, and the script the two-process
tests launch.

The model's replies are scripted at the generation boundary (the model's `generate`), as TRL's own tool tests do: a
prompt "Task i" makes the model call `add(step=1)` until it has seen i % 3 tool results, then answer "Done". Each
rollout's environment counts its own calls, so a shared or reused-without-reset environment would count too many. The
tokenizer is the byte tokenizer with TRL's Qwen2.5 chat template, which renders and parses tool calls.

`torchrun --nproc_per_node 2 tests/scripts/tool_tasks.py OUT_DIR MODE` writes, per rank, what the reward and the
environments saw in each round to OUT_DIR/rank{R}.json (MODE: `environment`, `environments` or `tools`).
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
        self.rounds, self.resets = [], []

    def reward(self, completions, task, **kwargs):
        """A reward function that records the round (it returns 0, so it does not move any advantage)."""
        calls = [sum(message["role"] == "tool" for message in completion) for completion in completions]
        rewarded = [[int(t), n] for t, n in zip(task, calls, strict=True)]
        self.rounds.append(
            {"rewarded": [int(t) for t in task], "calls": rewarded, "resets": self.resets, "scored": []}
        )
        self.resets = []
        return [0.0] * len(completions)

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


def build(out_dir: str, mode: str, num_processes: int = 1, scripted: bool = True, **overrides):
    """A CoBAGRPOTrainer on the scripted tasks; returns (trainer, record, generate batch sizes).

    `environment`: one environment class, whose `get_reward` defines success. `environments`: a dict of two, routed
    by the `environment` column, prompt ids by row index. `tools`: a plain tool function and no environment.
    """
    from coba_trl import CoBAConfig, CoBAGRPOTrainer

    tokenizer = tool_tokenizer()
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
    return trainer, record, batch_sizes


def main(out_dir: str, mode: str) -> None:
    trainer, record, batch_sizes = build(out_dir, mode, num_processes=int(os.environ.get("WORLD_SIZE", "1")))
    trainer.train()
    seen = {"rounds": record.rounds, "batch_sizes": batch_sizes, "log_history": trainer.state.log_history}
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(seen, f)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
