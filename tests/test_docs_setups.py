"""docs/setups.md's examples run as written: every ```python block executes, offline, in a temporary directory."""

from pathlib import Path

import pytest
from test_readme import fenced_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "setups.md"
BLOCKS = [code for info, code in fenced_blocks(PAGE.read_text()) if info == "python"]


def test_the_page_has_an_example_per_setup():
    assert len(BLOCKS) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block {i + 1}" for i in range(len(BLOCKS))])
def test_setups_python_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"docs/setups.md python block {index + 1}", "exec"), {"__name__": "__setups__"})
