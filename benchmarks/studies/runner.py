"""Run any study declared in `benchmarks/studies/protocols/` (docs/results.md): warm starts, every arm x unit, then
its page docs/studies/<name>.md.

    python benchmarks/studies/runner.py warm_starts                 # warm starts, every arm x unit, then its page
    python benchmarks/studies/runner.py warm_starts --report_only   # regenerate the study's page and plots
    python benchmarks/studies/runner.py warm_starts --quick         # smoke run (CI): tiny sizes, a few steps, no docs
    python benchmarks/studies/runner.py warm_starts --pilot --arms coba --seeds 0   # F_t and timing only

A unit is a (warm-start seed, RL seed) pair: every arm of a unit starts from the same checkpoint, sees the same
prompts in the same order and spends the same rollouts per round (unless its declaration says otherwise). Runs go
two at a time with one torch thread each; existing run files are kept, so an interrupted study resumes.
"""

from __future__ import annotations

import os

from coba_trl.numerics import pin_cpu_numerics

if __name__ == "__main__":
    pin_cpu_numerics()  # torch's CPU code paths pinned, as in the demo (docs/numerics.md)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402

if __name__ == "__main__":  # run as a script: the benchmarks folder, where `studies` is a package, on the path
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from studies.declaration import Study, units  # noqa: E402
from studies.paths import pilot_path, run_path, warm_start_dir  # noqa: E402
from studies.protocols import load_study  # noqa: E402
from studies.provenance import machine_record, provenance  # noqa: E402
from studies.report.pages import PAGES, write_report  # noqa: E402
from studies.run import run_arm  # noqa: E402
from studies.warm_start import prepare_warm_start  # noqa: E402


def regime_protocols(study: Study, options) -> dict[str, dict]:
    """Each regime's protocol after `--quick`, `--seeds`, `--warm_start_seeds`, `--max_steps` and `--set`."""
    protocols = {}
    for regime, overrides in study.regimes.items():
        protocol = {**study.protocol, **overrides, **(study.quick if options.quick else {})}
        for key in ("seeds", "warm_start_seeds", "max_steps"):
            if getattr(options, key) is not None:
                protocol[key] = getattr(options, key)
        for item in options.set:
            key, value = item.split("=", 1)
            protocol[key] = json.loads(value)
        protocols[regime] = protocol
    return protocols


def jobs(study: Study, protocols: dict, arms: list[str], output_dir: str, scratch_dir: str, pilot: bool) -> list:
    """Every warm start and run, unit by unit (a study stopped by its time limit leaves whole units), regimes and
    arms in declaration order (larger budgets first). A warm start comes just before the first run that needs it,
    and a run waits for its warm start, so no worker computes warm starts that units far down the list need."""
    ordered = sorted(arms, key=lambda arm: -study.arms[arm].get("budget_multiplier", 1))
    regime_units = {regime: units(protocol) for regime, protocol in protocols.items()}
    schedule, prepared = [], set()
    for position in range(max(len(unit_list) for unit_list in regime_units.values())):
        warm, runs = [], []
        for regime, protocol in protocols.items():
            if position >= len(regime_units[regime]):
                continue
            warm_seed, seed = regime_units[regime][position]
            common = {"output_dir": os.path.join(output_dir, regime), "scratch_dir": os.path.join(scratch_dir, regime)}
            common.update(
                protocol=protocol, legacy="warm_start_seeds" not in protocol, pilot=pilot, warm_seed=warm_seed
            )
            if (regime, warm_seed) not in prepared:
                prepared.add((regime, warm_seed))
                warm.append({**common, "kind": "warm_start"})
            for arm in ordered:
                runs.append({**common, "kind": "run", "arms": study.arms, "arm": arm, "seed": seed})
                runs[-1]["record"] = study.record
        schedule += warm + runs  # the unit's warm starts first: one worker prepares them while another runs
    return schedule


def _worker(job: dict) -> str:
    import torch

    torch.set_num_threads(1)
    if job["kind"] == "warm_start":
        return _warm_start(job)
    record = os.path.join(warm_start_dir(job["scratch_dir"], job["warm_seed"], job["legacy"]), "before_rl.json")
    while not os.path.exists(record):  # its warm start is being prepared by another worker
        time.sleep(5)
    return _run(job)


def _warm_start(job: dict) -> str:
    start = time.perf_counter()
    prepare_warm_start(job["protocol"], job["scratch_dir"], job["warm_seed"], job["legacy"], pilot=job["pilot"])
    if not job["legacy"]:  # the before-RL record also next to the runs (the committed raw results)
        source = os.path.join(warm_start_dir(job["scratch_dir"], job["warm_seed"], False), "before_rl.json")
        target = os.path.join(job["output_dir"], "warm_start", f"warm{job['warm_seed']}.json")
        if os.path.abspath(source) != os.path.abspath(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(source) as handle, open(target, "w") as out:
                out.write(handle.read())
    return f"warm start {job['warm_seed']} of {job['output_dir']} ({time.perf_counter() - start:.0f} s)"


def _run(job: dict) -> str:
    path = (pilot_path if job["pilot"] else run_path)(
        job["output_dir"], job["arm"], job["seed"], job["warm_seed"], job["legacy"]
    )
    if os.path.exists(path) and not job["pilot"]:
        return f"{path} (kept)"
    result = run_arm(job)
    if job["pilot"]:
        failure = " ".join(f"{value:.2f}" for value in result["coba/failure_rate"] if value is not None)
        return (
            f"[pilot] {path}: {result['wall_time_s']} s wall, {result['cpu_time_s']} s CPU, {result['train_time_s']} "
            f"s training without evaluations, {result['generation_time_s']} s generating; F_t by round {failure}"
        )
    return f"{path} in {result['wall_time_s']} s"


def _map(function, items: list, workers: int, start: float) -> None:
    if workers > 1:
        # Not multiprocessing.Pool: its daemonic workers cannot start the reward's grading processes.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1) as pool:
            for future in as_completed([pool.submit(function, item) for item in items]):
                print(f"[study] {future.result()}; {time.perf_counter() - start:.0f} s", flush=True)
    else:
        for item in items:
            print(f"[study] {function(item)}; {time.perf_counter() - start:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="A declaration in benchmarks/studies/protocols/, e.g. warm_starts.")
    parser.add_argument("--quick", action="store_true", help="Tiny sizes and a few steps (smoke test, no docs).")
    parser.add_argument("--output_dir", default=None, help="Raw results folder (default: the declaration's).")
    parser.add_argument("--arms", nargs="+", default=None, help="Only these arms (default: all).")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="Override the RL seeds.")
    parser.add_argument("--warm_start_seeds", nargs="+", type=int, default=None, help="Override the warm starts.")
    parser.add_argument("--regimes", nargs="+", default=None, help="Only these regimes (default: all).")
    parser.add_argument("--max_steps", type=int, default=None, help="Override max_steps (pilots only).")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=JSON", help="Override protocol entries (pilots).")
    parser.add_argument(
        "--pilot", action="store_true", help="Keep only timing and training series (F_t), no accuracy."
    )
    parser.add_argument("--workers", type=int, default=2, help="Runs in parallel (one CPU thread each).")
    parser.add_argument("--report_only", action="store_true", help="Only render the raw JSON into the study's page.")
    parser.add_argument("--docs_dir", default=PAGES, help="Where the report writes the study's page and plots.")
    options = parser.parse_args(argv)
    try:
        study = load_study(options.study)
    except ValueError as error:
        parser.error(str(error))
    arms = options.arms or list(study.arms)
    unknown = sorted(set(arms) - set(study.arms))
    if unknown:
        parser.error(f"--arms {' '.join(unknown)}: not arms of {study.name} ({', '.join(study.arms)})")
    protocols = regime_protocols(study, options)
    if options.regimes:
        protocols = {regime: protocols[regime] for regime in options.regimes}
    if options.quick:  # never next to a study's committed raw results
        output_dir = options.output_dir or os.path.join("outputs", f"{study.name}_quick")
        scratch_dir = output_dir
    else:
        output_dir = options.output_dir or study.output_dir
        scratch_dir = output_dir if options.output_dir or not study.scratch_dir else study.scratch_dir
    if not options.report_only:
        start = time.perf_counter()
        if not options.pilot:
            os.makedirs(output_dir, exist_ok=True)
            record = {"protocol": protocols, "arms": study.arms, "machine": machine_record(), **provenance()}
            if list(protocols) == [""]:  # studies 1 and 2: one regime, the protocol itself
                record["protocol"] = protocols[""]
            with open(os.path.join(output_dir, "protocol.json"), "w") as handle:
                json.dump(record, handle, indent=2)
        _map(_worker, jobs(study, protocols, arms, output_dir, scratch_dir, options.pilot), options.workers, start)
        seconds = time.perf_counter() - start
        print(f"[study] all runs done in {seconds:.0f} s", flush=True)
        if not options.pilot:
            load = [round(value, 2) for value in os.getloadavg()]
            with open(os.path.join(output_dir, "wall_time.json"), "w") as handle:
                json.dump({"wall_time_s": round(seconds, 1), "load_average": load}, handle)
    if (not options.quick and not options.pilot) or options.report_only:
        for path in write_report(study, output_dir, options.docs_dir):
            print(path)


if __name__ == "__main__":
    main()
