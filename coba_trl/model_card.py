"""The model card of a CoBA-RL run: TRL's card, completed with what only this trainer knows.

TRL's `create_model_card` writes ``<output_dir>/README.md`` from its template. For a model that is not on the Hub
(built in memory, or loaded from a local directory, and not pushed) the template fills in ``None``: "Model Card for
None", a link to ``huggingface.co/None`` and a quick start with ``model="None"`` and a generic question.
`complete_model_card` rewrites that card in place:

- the title and `model_name` name the model: the Hub id when there is one, else the output folder's name;
- TRL's placeholder `licence: license` goes; a model built in memory by coba-trl (the CPU demo) gets
  `license: apache-2.0`, the project's licence, and a model fine-tuned from another keeps no licence line (its base
  model's licence applies, which the card cannot know offline);
- the base model and the dataset (`dataset_name`, as given to `create_model_card`) are linked only when they are
  Hub ids, and named as given otherwise;
- the quick start loads that model (the Hub id, else the output folder's absolute path, so it runs from any
  directory) and asks it a prompt of the training set;
- "Training procedure" says in a sentence how the model was trained (TRL leaves it empty without a tracker);
- a "CoBA-RL settings" section lists the allocator's fields (the `CoBAConfig` fields the run used) and the rollout
  layout, followed by results when given (the CPU demo passes its held-out accuracy before and after RL).

It is idempotent: the generated part sits between markers and is replaced on a second call.
"""

from __future__ import annotations

import json
import os
import re
import textwrap

from datasets import IterableDataset
from huggingface_hub import ModelCard

import coba_trl
from coba_trl.config import CoBAConfig, coba_field_names

# The paper TRL cites in the model card of a `CoBAGRPOTrainer` run (`_paper`).
PAPER = {
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

CARD_FILE = "README.md"
PROJECT_LICENSE = "apache-2.0"
BEGIN, END = "<!-- coba-trl:begin -->", "<!-- coba-trl:end -->"
# GRPOConfig fields that, with the CoBA fields, say how the rollout budget of a run was spent.
LAYOUT_FIELDS = (
    "num_generations",
    "generation_batch_size",
    "steps_per_generation",
    "num_iterations",
    "learning_rate",
    "loss_type",
    "beta",
    "temperature",
    "max_completion_length",
    "seed",
)
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def is_hub_id(name: str | None) -> bool:
    """Whether `name` reads as an ``owner/name`` Hub id and is not a local path."""
    return bool(name) and bool(_HUB_ID.match(name)) and not os.path.exists(name)


def coba_settings(args: CoBAConfig) -> dict[str, object]:
    """The CoBA fields of `args` (the `coba_*` ones only for the CoBA allocator) and the rollout layout."""
    names = coba_field_names()
    if args.budget_allocator != "coba":
        names = [name for name in names if not name.startswith("coba_")]
    return {name: getattr(args, name) for name in (*names, *LAYOUT_FIELDS)}


def settings_section(args: CoBAConfig, steps: int, results: dict[str, str] | None = None, spending=None) -> str:
    """The card's CoBA section; `spending` (`coba_trl.rounds.spending.Spending`) adds what the run generated."""
    prompts = args.prompts_per_round
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in coba_settings(args).items())
    spent = ""
    if spending is not None and spending.rounds:
        spent = (
            f" In all it generated {spending.generated:,} completions in {spending.rounds:,} "
            f"round{'' if spending.rounds == 1 else 's'} and trained "
            f"{spending.rows_trained:,} rows, {spending.rows_with_spread:,} of them from groups with a spread of "
            "rewards."
        )
    text = (
        f"## CoBA-RL settings\n\nTrained with `CoBAGRPOTrainer` (coba-trl {coba_trl.__version__}) for {steps} "
        f"optimizer steps. Each generation round split {args.generation_batch_size} rollouts over {prompts} distinct "
        f"prompts (mean group size {args.num_generations}, from {args.min_generations} to {args.max_generations} per "
        f"prompt) with the `{args.budget_allocator}` allocator.{spent}\n\n| Setting | Value |\n|---|---|\n{rows}\n"
    )
    if results:
        lines = "\n".join(f"| {name} | {value} |" for name, value in results.items())
        text += f"\n## Results\n\n| Measure | Value |\n|---|---|\n{lines}\n"
    return f"{BEGIN}\n{text}{END}\n"


def quick_start(model: str, prompt, max_new_tokens: int, device_map: str = "auto") -> str:
    """A pipeline call that loads `model` and asks it `prompt` (chat messages or a string) from the training set."""
    name = "messages" if isinstance(prompt, list) else "prompt"
    return (
        "## Quick start\n\n```python\nfrom transformers import pipeline\n\n"
        f'generator = pipeline("text-generation", model={json.dumps(model)}, device_map="{device_map}")\n'
        f"{name} = {prompt!r}  # a prompt of the training set\n"
        f"output = generator({name}, max_new_tokens={max_new_tokens}, do_sample=False, return_full_text=False)[0]\n"
        'print(output["generated_text"])\n```\n\n'
    )


def origin_sentence(source: str, description: str | None, dataset_name: str | None) -> str:
    """The card's first sentence: where the model came from and what it was trained on (links only to the Hub)."""
    if is_hub_id(source):
        sentence = f"This model is a fine-tuned version of [{source}](https://huggingface.co/{source})"
    elif description:
        sentence = f"This model was trained from {description}"
    elif source:
        sentence = f"This model is a fine-tuned version of `{source}` (a local model)"
    else:
        sentence = "This model was trained from a model built in memory (not from a Hub checkpoint)"
    if is_hub_id(dataset_name):
        sentence += f" on the [{dataset_name}](https://huggingface.co/datasets/{dataset_name}) dataset"
    elif dataset_name:
        sentence += f" on `{dataset_name}`"
    return sentence + "."


def training_procedure(args: CoBAConfig, steps: int, dataset_name: str | None) -> str:
    """One paragraph: how the model was trained, for TRL's empty "Training procedure" section."""
    prompts = args.prompts_per_round
    data = f" on `{dataset_name}`" if dataset_name else ""
    return (
        f"Trained with GRPO through coba-trl's `CoBAGRPOTrainer` for {steps} optimizer steps{data}. Each generation "
        f"round sampled {args.generation_batch_size} completions for {prompts} distinct prompts, and the "
        f"`{args.budget_allocator}` allocator decided how many each prompt got (from {args.min_generations} to "
        f"{args.max_generations}), from the prompt's past pass rate; the advantages are computed within each "
        "prompt's group, whatever its size. The settings are listed below."
    )


def complete_model_card(
    trainer,
    dataset_name: str | None = None,
    results: dict[str, str] | None = None,
    base_model: str | None = None,
    device_map: str = "auto",
) -> str | None:
    """Rewrite the card TRL wrote in ``trainer.args.output_dir``; returns its path (None off the main process).

    `dataset_name` is the one given to `create_model_card`; `results` become a table of measures; `base_model`
    describes a starting model that is not on the Hub (e.g. "a tiny Qwen2 model built in memory").
    """
    path = os.path.join(trainer.args.output_dir, CARD_FILE)
    if not trainer.is_world_process_zero() or not os.path.isfile(path):
        return None
    args = trainer.args
    card = ModelCard.load(path)
    hub_id = trainer.hub_model_id or args.hub_model_id
    name = hub_id or os.path.basename(os.path.abspath(args.output_dir))
    location = hub_id or os.path.abspath(args.output_dir)
    source = getattr(trainer.model.config, "_name_or_path", "") or ""
    text = re.sub(r"^# Model Card for None$", f"# Model Card for {name}", card.text, flags=re.MULTILINE)
    text = re.sub(
        r"^This model (?:is a fine-tuned version of|was trained from) .*$",
        lambda _: origin_sentence(source, base_model, dataset_name),
        text,
        count=1,
        flags=re.MULTILINE,
    )
    card.data.datasets = dataset_name if is_hub_id(dataset_name) else None
    card.data.model_name = name
    card.data.licence = None  # TRL's template placeholder (`licence: license`)
    if not source:
        card.data.license = PROJECT_LICENSE  # weights made by coba-trl from scratch
    if not is_hub_id(source):
        card.data.base_model = None
    dataset = trainer.train_dataset
    prompt = (next(iter(dataset.take(1))) if isinstance(dataset, IterableDataset) else dataset[0])["prompt"]
    text = re.sub(
        r"## Quick start\n.*?(?=## Training procedure)",
        lambda _: quick_start(location, prompt, args.max_completion_length, device_map),
        text,
        flags=re.DOTALL,
    )
    text = re.sub(
        r"## Training procedure\n\s*(?:Trained with GRPO through coba-trl[^\n]*\n\s*)?(?=This model was trained with)",
        lambda _: f"## Training procedure\n\n{training_procedure(args, trainer.state.global_step, dataset_name)}\n\n",
        text,
        count=1,
    )
    section = settings_section(args, trainer.state.global_step, results, trainer.round_runner.spending)
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1 :]
    else:
        text = text.replace("### Framework versions", section + "\n### Framework versions", 1)
    card.text = text
    card.save(path)
    return path
