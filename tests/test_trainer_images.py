"""A prompt dataset with an image column trains with variable groups through transformers generation (a tiny LLaVA
built locally): each row's image reaches its completions' reward and the vision tower, in the planned group sizes.

vLLM colocate with images has no test: vLLM 0.30's CPU build runs no vision model here. Its LLaVA, Qwen2-VL,
Qwen2.5-VL, Qwen3-VL, Gemma 3 and LLaVA-NeXT implementations import torchvision, which the vLLM CPU install removes,
and a tiny Idefics3 (whose implementation imports without it) loaded but failed in vLLM's vision encoder on the first
request with an image (docs/setups.md, "Images")."""

from collections import Counter

import numpy as np
import pytest
from datasets import Dataset
from PIL import Image
from scripts.tiny_coba import TINY_ARGS

from coba_trl import CoBAConfig, CoBAGRPOTrainer
from coba_trl.rounds.log import read_rounds
from coba_trl.tiny import build_tiny_llava

COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "white": (255, 255, 255)}


def image_dataset() -> Dataset:
    """One question, four images of one colour each; the colour names the prompt (`prompt_id_column`)."""
    images = [Image.new("RGB", (32, 32), rgb) for rgb in COLOURS.values()]
    prompt = [{"role": "user", "content": "Which colour is this?"}]
    return Dataset.from_dict({"prompt": [prompt] * len(COLOURS), "image": images, "colour": list(COLOURS)})


class ImageCheckingReward:
    """Parity of the completion's length; records each call's rows per colour and whether every image it received
    is the colour of its row."""

    __name__ = "image_checking_reward"

    def __init__(self):
        self.rows, self.images_match = [], []

    def __call__(self, completions, image, colour, **kwargs):
        self.rows.append(dict(Counter(colour)))
        seen = [tuple(int(v) for v in np.asarray(img.convert("RGB")).reshape(-1, 3).mean(0)) for img in image]
        self.images_match.append(all(rgb == COLOURS[name] for rgb, name in zip(seen, colour, strict=True)))
        return [float(len(completion[0]["content"]) % 2 == 0) for completion in completions]


def _colours(pixel_values) -> dict:
    """The colour of each image of a batch of normalised pixel values (channels above or below their mean), counted."""
    signs = (pixel_values.mean(dim=(2, 3)) > 0).tolist()
    names = {tuple(value > 0 for value in rgb): name for name, rgb in COLOURS.items()}
    return dict(Counter(names[tuple(sign)] for sign in signs))


@pytest.mark.slow
def test_an_image_column_trains_with_variable_groups_and_reaches_the_model(tmp_path):
    model, processor = build_tiny_llava()
    tower_calls = []  # the colours of the images in each call of the vision tower (generation, the loss's forward)
    model.model.vision_tower.register_forward_pre_hook(lambda module, args: tower_calls.append(_colours(args[0])))
    reward = ImageCheckingReward()
    args = CoBAConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=4,
        max_steps=4,
        prompt_id_column="colour",
        seed=1,
        **TINY_ARGS,
    )
    trainer = CoBAGRPOTrainer(model, reward, args=args, train_dataset=image_dataset(), processing_class=processor)
    trainer.train()
    log = read_rounds(tmp_path)
    assert len(log) == len(reward.rows) == 4
    for record, rows in zip(log, reward.rows, strict=True):
        assert rows == dict(zip(record["prompt_ids"], record["group_sizes"], strict=True))
    assert any(len(set(record["group_sizes"])) > 1 for record in log)  # variable groups from the second round
    assert all(reward.images_match)
    calls_per_round = len(tower_calls) // len(log)
    assert calls_per_round >= 2 and len(tower_calls) == calls_per_round * len(log)  # generation and loss, every round
    for index, record in enumerate(log):  # every completion row's own image reached the model
        planned = dict(zip(record["prompt_ids"], record["group_sizes"], strict=True))
        assert all(call == planned for call in tower_calls[index * calls_per_round : (index + 1) * calls_per_round])
