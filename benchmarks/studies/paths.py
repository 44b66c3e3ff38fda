"""Where a study's raw files lie under its output folder (warm starts, runs, pilots), and how each is written."""

from __future__ import annotations

import json
import os


def warm_start_dir(output_dir: str, warm_seed: int, legacy: bool) -> str:
    """Checkpoint and before-RL record of one warm start (studies 1 and 2: the single `warm_start/`)."""
    return os.path.join(output_dir, "warm_start") if legacy else os.path.join(output_dir, "warm_start", str(warm_seed))


def run_name(arm: str, warm_seed: int, seed: int, legacy: bool) -> str:
    return f"{arm}_seed{seed}" if legacy else f"{arm}_warm{warm_seed}_seed{seed}"


def run_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "runs", run_name(arm, warm_seed, seed, legacy) + ".json")


def pilot_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "pilots", run_name(arm, warm_seed, seed, legacy) + ".json")


def write_json(path: str, result: dict) -> dict:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)
    return result
