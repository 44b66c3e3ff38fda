"""Speed cost of pinned CPU numerics (docs/numerics.md): the same short CPU demo, pinned and unpinned, interleaved.

    python benchmarks/numerics_cost.py                  # 3 pairs of the short demo below
    python benchmarks/numerics_cost.py --pairs 5 -- --max_steps 20 --demo_warm_start_steps 300

Each run is `examples/train_qwen.py` in its own process, so each loads torch under its own setting: pinned (the
demo's default, `coba_trl.numerics.PINNED_VARIABLES`) or unpinned (`COBA_PIN_NUMERICS=0`: torch's defaults for this
processor). The pairs alternate which setting runs first, so a change of machine load falls on both. Times: the
process's CPU time (imports included; the figure least moved by other work on the machine), the demo's own
`wall_time_s` (warm start, held-out evaluations and RL, not the imports) and its `rl_wall_time_s`. Flags after `--`
replace the short demo's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from machine import machine_line

from coba_trl.numerics import PINNED_VARIABLES, SWITCH

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHORT_DEMO = [
    "--max_steps", "10",
    "--demo_warm_start_steps", "150",
    "--demo_num_heldout", "100",
    "--demo_eval_steps", "10",
    "--disable_tqdm", "true",
]  # fmt: skip
SETTINGS = {"pinned": {SWITCH: "1"}, "unpinned": {SWITCH: "0"}}


def run_demo(flags: list[str], setting: str, output_dir: str) -> dict:
    """One demo run in a fresh process: its `demo_summary.json`, CPU time and torch's CPU capability as the demo sets
    it (a second process that pins as the demo does)."""
    env = {name: value for name, value in os.environ.items() if name not in (*PINNED_VARIABLES, SWITCH)}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **SETTINGS[setting])
    command = [sys.executable, os.path.join(ROOT, "examples", "train_qwen.py"), *flags, "--output_dir", output_dir]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{setting} run failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    with open(os.path.join(output_dir, "demo_summary.json")) as handle:
        summary = json.load(handle)
    summary["cpu_time_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    probe = (
        "from coba_trl.numerics import pin_cpu_numerics; pin_cpu_numerics(); import torch; "
        "print(torch.backends.cpu.get_cpu_capability())"
    )
    capability = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    summary["torch_cpu_capability"] = capability.stdout.strip()
    return summary


def ratio_line(name: str, ratios: list[float]) -> str:
    spread = f"range {min(ratios):.3f} to {max(ratios):.3f}"
    return f"{name}: pinned / unpinned median {statistics.median(ratios):.3f} ({spread})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3, help="Pinned-unpinned pairs (the order alternates).")
    parser.add_argument("demo_flags", nargs="*", help="Flags of examples/train_qwen.py, after `--`.")
    args = parser.parse_args()
    flags = args.demo_flags or SHORT_DEMO
    print(machine_line())
    print(f"workload: python examples/train_qwen.py {' '.join(flags)}")
    print(f"pinned: {' '.join(f'{k}={v}' for k, v in PINNED_VARIABLES.items())}; unpinned: {SWITCH}=0", flush=True)
    ratios = {"process CPU time": [], "demo wall time": [], "RL wall time": []}
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            order = ("pinned", "unpinned") if pair % 2 == 0 else ("unpinned", "pinned")
            times = {}
            for setting in order:
                summary = run_demo(flags, setting, os.path.join(scratch, f"{setting}_{pair}"))
                times[setting] = summary
                print(
                    f"pair {pair} {setting:>8} (torch CPU capability {summary['torch_cpu_capability']}): CPU "
                    f"{summary['cpu_time_s']:.1f} s, wall {summary['wall_time_s']:.1f} s, RL wall "
                    f"{summary['rl_wall_time_s']:.1f} s, held-out accuracy "
                    f"{summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f}",
                    flush=True,
                )
            for name, key in zip(ratios, ("cpu_time_s", "wall_time_s", "rl_wall_time_s"), strict=True):
                ratios[name].append(times["pinned"][key] / times["unpinned"][key])
    for name, values in ratios.items():
        print(ratio_line(name, values))
    print(machine_line())


if __name__ == "__main__":
    main()
