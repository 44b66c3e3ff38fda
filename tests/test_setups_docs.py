"""docs/setups.md's examples run as written: every ```python block, in order, in one namespace (later examples use
the model the first one builds), offline, in a temporary working directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "setups.md"
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return [m.group("code") for m in FENCE.finditer(PAGE.read_text()) if m.group("info").strip() == "python"]


def test_the_page_has_an_example_per_setup():
    text = PAGE.read_text()
    for setup in (
        "environment_factory=Countdown",
        "environment_factory={",
        "rollout_func=rollout_func",
        "IterableDataset",
        "success_threshold",
        "image",
    ):
        assert any(setup in block for block in python_blocks()), setup
    assert "## Tools on several processes" in text


@pytest.mark.slow
def test_the_examples_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    namespace = {"__name__": "__setups__"}
    for index, code in enumerate(python_blocks()):
        exec(compile(code, f"docs/setups.md python block {index + 1}", "exec"), namespace)
        trainer = namespace.get("trainer")
        if trainer is not None:
            assert trainer.state.global_step == trainer.args.max_steps  # each example trained all its steps
            namespace.pop("trainer")
