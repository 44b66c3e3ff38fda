"""Where a study's raw files lie under its output folder (warm starts, runs, their allocation logs, pilots), and how
each is written."""

from __future__ import annotations

import gzip
import json
import os


def warm_start_dir(output_dir: str, warm_seed: int, legacy: bool) -> str:
    """Checkpoint and before-RL record of one warm start (studies 1 and 2: the single `warm_start/`)."""
    return os.path.join(output_dir, "warm_start") if legacy else os.path.join(output_dir, "warm_start", str(warm_seed))


def run_name(arm: str, warm_seed: int, seed: int, legacy: bool) -> str:
    return f"{arm}_seed{seed}" if legacy else f"{arm}_warm{warm_seed}_seed{seed}"


def run_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "runs", run_name(arm, warm_seed, seed, legacy) + ".json")


def rounds_log_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    """A run's allocation log (`coba_rounds.jsonl`), gzip-compressed beside its raw result."""
    return os.path.join(output_dir, "runs", run_name(arm, warm_seed, seed, legacy) + ".rounds.jsonl.gz")


def write_gzip_copy(source: str, path: str) -> None:
    """`source` compressed to `path`, byte for byte the same for the same file (no name or time in the header)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(source, "rb") as handle, open(path + ".tmp", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as out:
            out.write(handle.read())
    os.replace(path + ".tmp", path)


def pilot_path(output_dir: str, arm: str, seed: int, warm_seed: int = 0, legacy: bool = True) -> str:
    return os.path.join(output_dir, "pilots", run_name(arm, warm_seed, seed, legacy) + ".json")


def write_json(path: str, result: dict) -> dict:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(result, handle)
    os.replace(path + ".tmp", path)
    return result
