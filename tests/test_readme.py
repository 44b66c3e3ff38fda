"""The README's examples run as written: every ```python block executes, the set-up commands match CI.

Blocks fenced as ```python hub need the Hugging Face Hub (downloads) and are skipped; every other ```python block
runs in order, in a temporary working directory, offline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
BLOCKS = [(m.group("info").strip(), m.group("code")) for m in FENCE.finditer(README)]
RUNNABLE = [code for info, code in BLOCKS if info == "python"]


def test_readme_marks_every_python_block_runnable_or_hub():
    assert {info for info, _ in BLOCKS if info.startswith("python")} == {"python", "python hub"}
    assert len(RUNNABLE) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_readme_python_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(RUNNABLE[index], f"README.md python block {index + 1}", "exec"), {"__name__": "__readme__"})


def test_the_two_set_up_commands_are_the_ones_ci_runs():
    install, tests = (code.strip() for info, code in BLOCKS[:2])
    assert install == 'pip install torch==2.13.0 && pip install -e ".[dev]" && python examples/train_qwen.py'
    assert tests == "python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[dev]"' in ci and "python -m pytest" in ci
