import importlib.util
import os

import pytest

pytest_plugins = ["scripts.vllm_fixtures"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config, items):
    # Tests marked `vllm` need a real vLLM; where it is installed, none is skipped.
    if VLLM_INSTALLED:
        return
    skip = pytest.mark.skip(
        reason="needs vLLM: install the README's 'CPU with vLLM' line, then `python -m pytest -m vllm`"
    )
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(skip)
