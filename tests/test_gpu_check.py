"""The one-shot GPU check (`benchmarks/gpu_check/check.py`) on CPU, so that its single run on a GPU finds every path
already exercised: the smoke mode, FSDP2 over gloo with the recipe's settings, and what a failing or hanging section
leaves."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from scripts.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _gpu_check(output_dir: Path, *options: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check" / "check.py"), "--device", "cpu"]
    command += ["--output_dir", str(output_dir), *options]
    process = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-4000:]
    report = json.loads((output_dir / "gpu_check.json").read_text())
    assert report["environment"]["versions"]["trl"].startswith("1.16")
    return report


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_the_in_process_sections(tmp_path):
    # A time limit already past: the speed arms stop after the warm-up cycle and one measured cycle of the three asked.
    report = _gpu_check(tmp_path, "--sections", "correctness", "lora", "speed", "--rounds", "3", "--time_limit", "0")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu_check.json"]  # no section left a log

    # Uniform CoBA reproduces GRPO exactly, gradient norms included; the scripted uneven groups arrive with numpy's
    # advantages.
    equivalence = report["correctness"]["uniform_equals_grpo"]
    assert [equivalence[key] for key in ("rewards", "advantages", "loss", "grad_norm", "rounds")] == [0, 0, 0, 0, 3]
    assert min(equivalence["grad_norm_grpo"]) > 0 and equivalence["passed"]
    scripted = report["correctness"]["scripted_allocation"]
    assert scripted["observed_group_sizes"] == scripted["expected_group_sizes"] == [[1, 1, 5, 9], [2, 2, 5, 7]]
    assert scripted["advantages_vs_numpy"] <= 1e-5

    # Equal work in every arm (16 completions of exactly 8 tokens), uneven groups only where CoBA allocates; the arms
    # take turns, the order reversed every cycle, and the time limit stops them after one measured cycle of the three.
    assert report["sizes"]["rounds"] == 3
    arms = report["speed"]["arms"]
    assert sorted(arms) == ["coba", "grpo", "uniform"]
    for name, arm in arms.items():
        assert arm["rounds_measured"] == 1 and arm["completion_tokens_per_round"] == 16 * 8, name
        order = [(r["cycle"], r["position"]) for r in arm["per_round"]]
        assert order == [(0, "cgu".index(name[0])), (1, "ugc".index(name[0]))], name
        split = arm["generation_s"] + arm["scoring_s"] + arm["training_s"]
        assert arm["round_s"] > 0 and split == pytest.approx(arm["round_s"], rel=1e-6), name
    assert arms["grpo"]["group_size_min"] == arms["uniform"]["group_size_max"] == 4
    assert arms["coba"]["group_size_min"] < 4 < arms["coba"]["group_size_max"]
    ratios = report["speed"]["ratios"]
    assert sorted(ratios) == ["coba/grpo", "coba/uniform", "uniform/grpo"]
    measured = {name: arm["per_round"][1] for name, arm in arms.items()}  # the pair is the measured cycle's rounds
    pairs = {"coba/grpo": ("coba", "grpo"), "uniform/grpo": ("uniform", "grpo"), "coba/uniform": ("coba", "uniform")}
    for name, (top, bottom) in pairs.items():
        for measure in ("round_s", "generation_s"):
            expected = measured[top][measure] / measured[bottom][measure]
            ratio = ratios[name][measure]
            assert ratio["pairs"] == 1 and ratio["per_pair"] == pytest.approx([expected]), (name, measure)
            assert ratio["median"] == ratio["low"] == ratio["high"] == pytest.approx(expected), (name, measure)

    lora, full = report["lora"], arms["coba"]
    assert lora["passed"] and 0 < lora["trainable_parameters"] < full["trainable_parameters"]


def test_the_interval_for_a_median_is_the_widest_order_statistics_that_cover_95_percent():
    speed = load_benchmark("gpu_check.speed")
    # P(Binomial(n, 1/2) <= k - 1) on each side: n = 8 allows only [min, max], n = 9 and 10 the second from each end.
    for n, (low, high), coverage in ((8, (1, 8), 1 - 2 / 256), (9, (2, 8), 1 - 20 / 512), (10, (2, 9), 1 - 22 / 1024)):
        values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose
        interval = speed.median_interval(values)
        assert (interval["low"], interval["high"], interval["pairs"]) == (low, high, n)
        assert interval["median"] == (n + 1) / 2 and interval["confidence"] == pytest.approx(coverage)
    assert speed.median_interval([3.0, 1.0])["confidence"] == pytest.approx(0.5)  # too few pairs: [min, max]


def test_ratios_pair_the_rounds_of_one_cycle_and_leave_out_the_warm_up():
    speed = load_benchmark("gpu_check.speed")
    orders = [speed.cycle_order(("c", "g", "u"), cycle) for cycle in (0, 1, 2)]
    assert orders == [("c", "g", "u"), ("u", "g", "c"), ("c", "g", "u")]
    coba = [{"cycle": c, "round_s": s} for c, s in ((0, 9.0), (1, 2.0), (2, 3.0), (3, 8.0))]
    grpo = [{"cycle": c, "round_s": s} for c, s in ((0, 1.0), (1, 1.0), (3, 2.0))]  # cycle 2 lost: no pair
    ratios = speed.paired_ratios({"coba": coba, "grpo": grpo}, measures=("round_s",))
    assert list(ratios) == ["coba/grpo"]
    assert ratios["coba/grpo"]["round_s"]["per_pair"] == [2.0, 4.0]
    assert ratios["coba/grpo"]["round_s"]["median"] == 3.0


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp_section_trains_fsdp2_sharded_over_gloo_with_the_recipe(tmp_path):
    fsdp = _gpu_check(tmp_path, "--sections", "fsdp")["fsdp"]
    assert fsdp["passed"] and fsdp["launch"]["exit"] == 0
    assert fsdp["distributed_type"] == "DistributedType.FSDP" and fsdp["fsdp2_sharded"]
    assert fsdp["num_processes"] == fsdp["sharded_over"] == 2 and fsdp["rounds_measured"] == 2
    assert all(norm > 0 for norm in fsdp["grad_norm"])
    log = (tmp_path / "fsdp.log").read_text()  # the launched processes' own output
    assert "[fsdp] rank 0: DistributedType.FSDP sharded over 2" in log and "[fsdp] rank 1:" in log


def test_a_failing_arm_leaves_the_other_arms_and_sections_to_run_and_its_traceback_in_the_log(tmp_path):
    gpu_check, sections = load_benchmark("gpu_check.check"), load_benchmark("gpu_check.sections")
    report = gpu_check.Report(str(tmp_path / "gpu_check.json"), {})

    def coba_arm():
        raise MemoryError("CUDA out of memory in arm coba")

    def speed(put, log_path):  # the speed section's shape: independent arms, each written as it ends
        parts = sections.Parts(log_path)
        arms = {arm: parts.run(arm, part) for arm, part in (("coba", coba_arm), ("grpo", lambda: {"round_s": 1.0}))}
        put("arms", {arm: result for arm, result in arms.items() if result is not None})
        parts.raise_if_any()

    cpu = gpu_check.torch.device("cpu")
    gpu_check.run_section("speed", speed, report, str(tmp_path), cpu, hang_s=60)
    gpu_check.run_section("lora", lambda put, log_path: put("passed", True), report, str(tmp_path), cpu, hang_s=60)
    on_disk = json.loads((tmp_path / "gpu_check.json").read_text())
    assert on_disk["speed"]["arms"] == {"grpo": {"round_s": 1.0}}
    assert on_disk["speed"]["error"] == "RuntimeError: coba: MemoryError: CUDA out of memory in arm coba"
    assert "in coba_arm" in (tmp_path / "speed.log").read_text()
    assert on_disk["lora"]["passed"] and not (tmp_path / "lora.log").exists()
    assert [gpu_check.verdict(on_disk[name]) for name in ("speed", "lora")] == ["error", "PASS"]


def test_a_section_still_running_writes_where_it_waits(tmp_path):
    gpu_check = load_benchmark("gpu_check.check")
    report = gpu_check.Report(str(tmp_path / "gpu_check.json"), {})

    def waiting_for_a_collective(put, log_path):
        time.sleep(2.0)

    cpu = gpu_check.torch.device("cpu")
    gpu_check.run_section("fsdp", waiting_for_a_collective, report, str(tmp_path), cpu, hang_s=0.2)
    log = (tmp_path / "fsdp.log").read_text()
    assert log.startswith("Timeout (") and "waiting_for_a_collective" in log
    assert report.data["fsdp"]["log"] == str(tmp_path / "fsdp.log")


def test_launch_stops_a_hanging_launch_with_the_processes_it_started_and_keeps_its_output(tmp_path):
    fsdp = load_benchmark("gpu_check.fsdp")
    log = tmp_path / "fsdp.log"
    worker = "import time; time.sleep(600)"
    launcher = (  # like torchrun: a worker in a session of its own, then wait
        "import subprocess, sys, time; "
        f"worker = subprocess.Popen([sys.executable, '-c', {worker!r}], start_new_session=True); "
        "print('worker', worker.pid, flush=True); worker.wait()"
    )
    assert fsdp.launch([sys.executable, "-c", launcher], str(log), timeout=5, env=dict(os.environ)) is None
    output = log.read_text()
    assert output.startswith("worker ")
    worker_pid = int(output.split()[1])
    assert not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE
    assert fsdp.launch([sys.executable, "-c", "raise SystemExit(3)"], str(log), timeout=60, env=dict(os.environ)) == 3


def test_cause_names_the_processes_error_not_the_launchers_banner():
    fsdp = load_benchmark("gpu_check.fsdp")
    crash = """\
[rank0]:   File "benchmarks/gpu_check/fsdp.py", line 119, in fsdp_rounds
[rank0]: AttributeError: 'DistributedDataParallel' object has no attribute 'is_gradient_checkpointing'
E1201 12:16:02.474000 6344 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "torch/distributed/launcher/api.py", line 383, in launch_agent
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
benchmarks/gpu_check/fsdp.py FAILED
============================================================
"""
    assert fsdp.cause(crash) == (
        "AttributeError: 'DistributedDataParallel' object has no attribute 'is_gradient_checkpointing'"
    )
    hang = "NCCL WARN Call to connect returned Connection refused\nTimeout (0:01:45)!\nThread 0x7f (most recent call first):"
    assert fsdp.cause(hang) == "Timeout (0:01:45)!"
    assert fsdp.cause("") == "no output"
