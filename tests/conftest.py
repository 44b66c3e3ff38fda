import importlib.util
import os

import pytest

pytest_plugins = ["scripts.vllm_fixtures"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread per process, here and in the processes the tests launch: the tests' models are tiny, and on a busy
# machine a second thread mostly waits for a core (a warm start ran 7 to 10 times slower with two at a load of 10).
os.environ.setdefault("OMP_NUM_THREADS", "1")

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


def pytest_terminal_summary(terminalreporter, config):
    # `python -m pytest` leaves the end-to-end runs out (pyproject.toml's addopts): say so, and how to run them. A run
    # given its own -m (`-m vllm`, `-m slow`) chose what it runs: nothing to say.
    if config.option.markexpr != "not slow":
        return
    slow = [item for item in terminalreporter.stats.get("deselected", []) if item.get_closest_marker("slow")]
    if slow:
        terminalreporter.write_line(
            f"{len(slow)} end-to-end tests marked slow were left out: `python -m pytest -m slow` runs them."
        )
