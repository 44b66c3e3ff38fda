"""The README's examples run as written: every ```python block executes (and those of docs/algorithm.md), the set-up
commands match CI, and every ```bash command that needs no network, GPU or vLLM runs.

Blocks fenced as ```python hub need the Hugging Face Hub (downloads) and are skipped; every other ```python block
runs in order, in a temporary working directory, offline. Shell commands run in a temporary directory laid out like
the repository; the demo's training commands get flags appended that shrink the task (the same flags otherwise), so
that each takes seconds. Commands that need vLLM are left to the vLLM test suite (`python -m pytest -m vllm`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from coba_trl.demo.flags import flagged_output_dir

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group("info").strip(), m.group("code")) for m in FENCE.finditer(text)]


BLOCKS = fenced_blocks(README)
# The runnable examples: the README's and the allocators' own in docs/algorithm.md (name, code).
RUNNABLE = [
    (f"{name} python block {index + 1}", code)
    for name, blocks in (
        ("README.md", BLOCKS),
        ("docs/algorithm.md", fenced_blocks((ROOT / "docs" / "algorithm.md").read_text())),
    )
    for index, code in enumerate(code for info, code in blocks if info == "python")
]


def test_readme_marks_every_python_block_runnable_or_hub():
    assert {info for info, _ in BLOCKS if info.startswith("python")} <= {"python", "python hub"}
    assert any(name.startswith("README.md") for name, _ in RUNNABLE)
    assert any(name.startswith("docs/algorithm.md") for name, _ in RUNNABLE)


@pytest.mark.slow
@pytest.mark.parametrize("name, code", RUNNABLE, ids=[name for name, _ in RUNNABLE])
def test_readme_python_block_runs(name, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, name, "exec"), {"__name__": "__readme__"})


CPU_TORCH = "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu"


TINY_EXAMPLE = next(code for info, code in BLOCKS if info == "python" and "build_tiny_qwen2" in code)


@pytest.mark.slow
def test_the_tiny_example_prints_what_the_readme_says(tmp_path, monkeypatch, capfd, caplog):
    """The lines the README shows after its tiny example, and its end-of-run line, are what the example prints."""
    monkeypatch.chdir(tmp_path)
    exec(compile(TINY_EXAMPLE, "README.md tiny example", "exec"), {"__name__": "__readme__"})
    printed = "".join(capfd.readouterr()).splitlines() + caplog.messages  # warnings come through `logging`
    after = README.split(f"{TINY_EXAMPLE}```", 1)[1]
    shown = fenced_blocks(after)[0]
    assert shown[0] == "text" and [line for line in printed if line.startswith("step ")] == shown[1].splitlines()
    end_of_run = re.search(r"`(\[coba\] [^`]*)`, \.\.\.", after).group(1)
    assert any(line.startswith(end_of_run) for line in printed), end_of_run
    warned = any(line.startswith("Round 1 trained no row from a group with spread") for line in printed)
    assert warned == ("a warning that round 1 trained no row from a group with spread" in after.split("```text")[0])


def test_the_two_set_up_commands_are_the_ones_ci_runs():
    """Two set-up commands, which CI runs as written: the install (torch's CPU build first, from PyTorch's CPU index,
    as pip's default index serves the CUDA build) with the demo, then the tests; the same torch for vLLM's CPU build."""
    install, tests = (code.strip() for info, code in BLOCKS[:2])
    assert install == f'{CPU_TORCH} && pip install -e ".[dev]" && python examples/train_qwen.py'
    assert tests == "python -m pytest"
    vllm_install = BLOCKS[2][1].splitlines()[0]
    assert vllm_install.startswith(f"{CPU_TORCH} && ")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in (install, vllm_install):
        assert f"{command} || exit 1" in ci
    assert "python -m pytest" in ci


def test_ci_runs_the_tests_the_readmes_test_command_leaves_out():
    """`python -m pytest` leaves out the tests marked slow (pyproject.toml's addopts), and CI runs them too."""
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert options["addopts"] == "-m 'not slow'"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci.index("python -m pytest -m slow") == ci.index("python -m pytest") + 1
    assert "`python -m pytest -m slow` runs those" in README


def shell_commands(readme: str = README) -> list[str]:
    """Every command of the README's ```bash blocks: continuation lines joined, comments and blank lines left out."""
    commands = []
    for info, code in BLOCKS:
        if info == "bash":
            for line in code.replace("\\\n", " ").splitlines():
                command = re.sub(r"\s+", " ", re.split(r"(?:^|\s)#", line, maxsplit=1)[0]).strip()
                if command:
                    commands.append(command)
    return commands


def what_it_needs(command: str) -> str | None:
    """What a README command needs that a test run lacks (network, GPUs, a GPU run's output), or None."""
    if command.startswith("pip install"):
        return "the package registry"
    if command == "python -m pytest":
        return "the test suite itself"
    if "accelerate launch" in command or "vllm serve" in command:
        return "GPUs"
    # --use_vllm, the vLLM servers (coba-trl's CPU server among them), the vLLM tests: the vLLM suite runs them
    if "vllm" in command or "cpu_server" in command:
        return "vLLM"
    if "Qwen/" in command or "<model>" in command:
        return "the Hugging Face Hub"
    if "outputs/qwen2.5" in command:
        return "the output of a GPU run"
    if "outputs/pass_rates" in command:
        return "pass rates scored by a Hub model"
    return None


SHELL = shell_commands()
OFFLINE = [command for command in SHELL if what_it_needs(command) is None]
# Appended to the README's demo runs: the same flags on a smaller task, so that each takes seconds (later flags win).
SMALL_DEMO = (
    "--demo_warm_start_steps 5 --demo_num_heldout 20 --demo_num_train_prompts 8 --per_device_train_batch_size 8 "
    "--demo_num_layers 1 --demo_hidden_size 32 --demo_num_heads 1 --disable_tqdm true"
).split()


def test_the_multi_gpu_launch_is_in_the_first_150_lines():
    assert any("accelerate launch" in line and "zero3_8gpu.yaml" in line for line in README.splitlines()[:150])


def test_every_shell_command_runs_here_or_says_what_it_needs():
    assert "python examples/train_qwen.py --help" in OFFLINE
    assert any("--resume_from_checkpoint" in command for command in OFFLINE)
    assert all(what_it_needs(command) for command in SHELL if command not in OFFLINE)
    assert 'pip install -e ".[vllm,deepspeed]"' in SHELL  # before the ZeRO-3 launches that need it
    zero3 = next(i for i, command in enumerate(SHELL) if "zero3_8gpu.yaml" in command)
    assert SHELL.index('pip install -e ".[vllm,deepspeed]"') < zero3


def run(command: str):
    """Run a README command in this process: the script's `main` with the command's arguments (the same code as
    `python <script>` but for its `__main__` lines, and without a new interpreter's start-up time)."""
    from coba_trl import plot
    from tests.test_evaluate import load_script as evaluate_script
    from tests.test_examples import load_script as train_script

    argv = shlex.split(command)
    if argv[1] == "examples/train_qwen.py":
        main, args = train_script().main, argv[2:] + ([] if "--help" in argv else SMALL_DEMO)
    elif argv[1] == "examples/evaluate.py":
        main, args = evaluate_script().main, argv[2:] + ["--max_problems", "4", "--dtype", "float32"]
    elif argv[1:3] == ["-m", "coba_trl.plot"]:
        main, args = plot.main, argv[3:]
    elif argv[1:3] == ["-m", "coba_trl.demo.model"]:
        from coba_trl.demo import model

        main, args = model.main, argv[3:]
    else:
        raise AssertionError(f"the README shell test has no runner for {command!r}")
    try:
        main(args)
    except SystemExit as exit:  # --help
        assert exit.code == 0, command


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory laid out like the repository (examples/, recipes/) holding a finished short demo run in
    outputs/cpu_demo, for the commands that read one."""
    directory = tmp_path_factory.mktemp("readme")
    for name in ("examples", "recipes"):
        (directory / name).symlink_to(ROOT / name)
    previous = os.getcwd()
    os.chdir(directory)
    try:
        run("python examples/train_qwen.py --output_dir outputs/cpu_demo --max_steps 2")
    finally:
        os.chdir(previous)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("command", OFFLINE)
def test_readme_shell_command_runs(command, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    run(command)
    out = capsys.readouterr().out
    if "--help" in command:
        assert out.startswith("usage: python examples/train_qwen.py")
    if "--budget_allocator" in command:  # a flagged run writes to a folder named after its flags, not outputs/cpu_demo
        flags = shlex.split(command)[2:]
        changed = {flag.removeprefix("--"): value for flag, value in zip(flags[::2], flags[1::2], strict=True)}
        recipe = yaml.safe_load(Path(changed["config"]).read_text()) if "config" in changed else {}
        folder = flagged_output_dir(changed, recipe.get("output_dir", "outputs/cpu_demo"))
        assert folder not in ("outputs/cpu_demo", recipe.get("output_dir")) and f"output: {folder}" in out
    if "--resume_from_checkpoint" in command:  # the resumed run ends where the uninterrupted one did
        summaries = [
            json.loads(Path(f"outputs/{name}/demo_summary.json").read_text())
            for name in ("demo_saved", "demo_resumed")
        ]
        for summary in summaries:
            del summary["rl_wall_time_s"], summary["wall_time_s"]
        assert summaries[0] == summaries[1] and "[resume]" in out
