"""One-shot GPU check of CoBAGRPOTrainer: correctness on CUDA, FSDP2, LoRA, then speed and memory against GRPOTrainer.

    bash benchmarks/gpu_check.sh OUT                                    # on a CUDA machine: install, then this
    python benchmarks/gpu_check/check.py --output_dir OUT               # the same, with everything installed
    python benchmarks/gpu_check/check.py --device cpu --output_dir OUT  # CPU smoke (CI): tiny sizes, same paths

The sections run in this order, most telling first, each on its own: one that fails or hangs leaves OUT/<section>.log
(its traceback, the stacks of a hang, or the launched processes' output) and the next one still runs. Every figure
is written to OUT/gpu_check.json as soon as it exists (each speed cycle, each check), so a run cut short keeps them.
1. correctness (`sections.py`): fp32, eager attention, deterministic algorithms; uniform CoBA against
   GRPOTrainer step for step, and a scripted uneven allocation.
2. fsdp (`fsdp.py`): two CoBA rounds under `recipes/accelerate/fsdp_8gpu.yaml`, launched in one process
   on CUDA (two over gloo on CPU) and stopped after `--fsdp_timeout` seconds.
3. lora: one CoBA round with a LoRA adapter.
4. speed (`speed.py`): arms `coba`, `grpo`, `uniform` on a Qwen2.5-0.5B-shaped model in bf16, 512
   completions of 128 tokens per round, the three trainers resident and trained a round each in turn (the order
   reversed every cycle; `--reverse_arms` starts from the other end); each ratio is the median of paired per-round
   ratios with a 95% interval. No cycle starts that would end past `--time_limit` (from the start of the script).
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import functools
import json
import os
import sys
import tempfile
import time
import traceback

START = time.perf_counter()  # the time limit counts from here, the heavy imports included
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; read when CUDA starts

if __name__ == "__main__":  # run as a script: the benchmarks folder, where `gpu_check` is a package, on the path
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from gpu_check.fsdp import check_fsdp  # noqa: E402
from gpu_check.sections import check_correctness, check_lora  # noqa: E402
from gpu_check.speed import ARMS, describe, measure_speed  # noqa: E402
from gpu_check.trainers import CPU_SMOKE, CPU_SPEED, QWEN25_05B, Sizes, free_memory, plain  # noqa: E402

SECTIONS = ("correctness", "fsdp", "lora", "speed")
SIZES = {"qwen2.5-0.5b": QWEN25_05B, "cpu-smoke": CPU_SMOKE, "cpu-speed": CPU_SPEED}


class Report:
    """OUT/gpu_check.json, rewritten whole (a temporary file, then a rename) every time a figure is added."""

    def __init__(self, path: str, data: dict):
        self.path, self.data = path, data
        self.save()

    def put(self, section: str, key: str, value) -> None:
        self.data.setdefault(section, {})[key] = value
        self.save()

    def save(self) -> None:
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=1, default=plain)
        os.replace(self.path + ".tmp", self.path)


def estimates(sizes: Sizes, device: torch.device, fsdp_timeout: float) -> dict:
    """Planned seconds on one H200 (estimates, not measurements): 15 s of imports, about 6.5 s per speed round of 512
    completions of 128 tokens (half the 12 s measured at 256 tokens: generation is host-bound, its time goes with the
    tokens per completion), 5 s to build a model, 45 s for the FSDP launch (a second Python, imports, two rounds)."""
    if device.type != "cuda":
        return {}
    speed = len(ARMS) * (5 + (1 + sizes.rounds) * 6.5)
    return {"imports": 15, "correctness": 20, "fsdp": min(45, fsdp_timeout), "lora": 15, "speed": speed}


def run_section(name: str, section, report: Report, output_dir: str, device: torch.device, hang_s: float) -> None:
    """Run `section(put, log_path)`; an exception is recorded (its traceback in OUT/<name>.log) and does not stop the
    check. A section still running after `hang_s` seconds writes "Timeout (h:mm:ss)!" and every thread's stack to
    its log (it goes on running); a log left empty is removed."""
    log_path = os.path.join(output_dir, f"{name}.log")
    put = functools.partial(report.put, name)
    start = time.perf_counter()
    open(log_path, "w").close()
    with open(log_path, "a") as log:  # appending: a launched process appends its output to the same file
        faulthandler.dump_traceback_later(max(hang_s, 1.0), file=log)
        try:
            section(put, log_path)
        except Exception as error:
            failed(error, "error", put, log)
        finally:
            faulthandler.cancel_dump_traceback_later()
        try:
            free_memory(device)
        except Exception as error:  # a CUDA error that outlived the section: the next sections will meet it too
            failed(error, "error_freeing_memory", put, log)
    put("section_s", time.perf_counter() - start)
    if os.path.getsize(log_path):
        put("log", log_path)
    else:
        os.remove(log_path)
    section_s, at = report.data[name]["section_s"], time.perf_counter() - START
    print(f"[{name}] {verdict(report.data[name])} in {section_s:.1f} s ({at:.0f} s since the start)", flush=True)


def failed(error: Exception, key: str, put, log) -> None:
    """Record `error` under `key`, its traceback in the section's log and in the output."""
    traceback.print_exc(file=log)
    log.flush()
    traceback.print_exc()
    put(key, f"{type(error).__name__}: {error}")


def verdict(result: dict) -> str:
    """`error`, `PASS` or `FAIL` for a section (one without checks of its own, like speed, passes when it ran)."""
    checks = [result.get("passed", True)] + [
        v["passed"] for v in result.values() if isinstance(v, dict) and "passed" in v
    ]
    return "error" if {"error", "error_freeing_memory"} & set(result) else "PASS" if all(checks) else "FAIL"


def environment(device: torch.device) -> dict:
    import accelerate
    import datasets
    import peft
    import transformers
    import trl

    modules = (torch, transformers, trl, accelerate, peft, datasets)
    return {
        "device": device.type,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "versions": {module.__name__: module.__version__ for module in modules},
        "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    }


def print_table(report: dict) -> None:
    speed = report.get("speed", {})
    print(
        f"\n{'arm':<8} {'round s':>8} {'gen s':>7} {'score s':>8} {'train s':>8} {'gen tok/s':>10} {'peak GiB':>9} "
        f"{'rounds':>6} groups (means over the measured rounds)"
    )
    for arm, r in speed.get("arms", {}).items():
        if not r["rounds_measured"]:
            continue
        peak = f"{r['peak_above_round_start_gib']:9.2f}" if "peak_above_round_start_gib" in r else f"{'-':>9}"
        print(
            f"{arm:<8} {r['round_s']:8.2f} {r['generation_s']:7.2f} {r['scoring_s']:8.3f} {r['training_s']:8.2f} "
            f"{r['generation_tokens_per_s']:10.0f} {peak} {r['rounds_measured']:6d} "
            f"{r['group_size_min']}..{r['group_size_max']}"
        )
    for name, measures in speed.get("ratios", {}).items():
        for measure, ratio in measures.items():
            print(f"{name} {measure}: median of paired ratios {describe(ratio)}, {ratio['confidence']:.1%} interval")
    for name in SECTIONS:
        if name in report:
            error = f" {report[name]['error']}" if "error" in report[name] else ""
            log = f" (log: {report[name]['log']})" if "log" in report[name] else ""
            print(f"{name}: {verdict(report[name])}{error}{log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--output_dir", default="outputs/gpu_check")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run only these")
    parser.add_argument(
        "--sizes",
        choices=list(SIZES),
        help="the model and round sizes of the LoRA and speed sections (default: qwen2.5-0.5b on CUDA, cpu-smoke on "
        "CPU; cpu-speed: hidden size 128, 4 layers, 16 prompts x 8 completions of 32 tokens)",
    )
    parser.add_argument(
        "--rounds", type=int, help="most measured speed cycles (default: the sizes', 8 or 1 for cpu-smoke)"
    )
    parser.add_argument("--time_limit", type=float, default=285.0, help="seconds from the start: no speed cycle after")
    parser.add_argument(
        "--reverse_arms",
        action="store_true",
        help="the first speed cycle runs uniform, grpo, coba (default: coba, grpo, uniform)",
    )
    parser.add_argument(
        "--fsdp_timeout", type=float, help="seconds before the FSDP launch is stopped (120 CUDA, 300 CPU)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(
            f"CUDA is not available to torch {torch.__version__} (CUDA {torch.version.cuda}); --device cpu runs "
            "the CPU smoke"
        )
    sizes = SIZES[args.sizes] if args.sizes else QWEN25_05B if device.type == "cuda" else CPU_SMOKE
    sizes = dataclasses.replace(sizes, rounds=args.rounds or sizes.rounds)
    fsdp_timeout = args.fsdp_timeout or (120.0 if device.type == "cuda" else 300.0)
    stop_at = START + args.time_limit
    out = args.output_dir
    os.makedirs(out, exist_ok=True)
    report = Report(os.path.join(out, "gpu_check.json"), {"environment": environment(device)})
    report.data["sizes"] = dataclasses.asdict(sizes)
    planned = estimates(sizes, device, fsdp_timeout)
    planned = {name: s for name, s in planned.items() if name in args.sections or name == "imports"}
    if planned:
        plan = ", ".join(f"{name} ~{s:.0f} s" for name, s in planned.items())
        print(f"plan (estimate for one H200): {plan}; about {sum(planned.values()) / 60:.1f} min in all")
    print(
        f"no speed cycle starts after {args.time_limit:.0f} s; the FSDP launch is stopped after {fsdp_timeout:.0f} s"
    )
    report.put("plan", "estimates_s", planned)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as runs:  # the trainers' output_dir (nothing is saved)
        sections = {
            "correctness": lambda put, log: check_correctness(device, runs, put, log),
            "fsdp": lambda put, log: check_fsdp(device, out, put, log, fsdp_timeout),
            "lora": lambda put, log: check_lora(sizes, device, runs, put),
            "speed": lambda put, log: measure_speed(sizes, device, runs, put, log, stop_at, args.reverse_arms),
        }
        for name in (name for name in SECTIONS if name in args.sections):
            # stacks in the log: 3x the estimate, 30 s past the time limit for speed; 10 minutes without an estimate
            if name == "speed":
                hang_s = max(stop_at - time.perf_counter(), 0) + (30 if planned else 600)
            else:
                hang_s = 3 * planned.get(name, 200)
            run_section(name, sections[name], report, out, device, hang_s)
    print_table(report.data)
    print(f"gpu_check: {time.perf_counter() - START:.0f} s in all")
    sys.exit(0 if all(verdict(report.data[name]) == "PASS" for name in args.sections) else 1)


if __name__ == "__main__":
    main()
