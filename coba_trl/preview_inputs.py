"""What the allocation preview (`python -m coba_trl.preview`) reads: the pass rates and the recipe.

The pass rates are a column of a .parquet / .jsonl / .json file (or a folder of them) or of a Hub dataset, or a .json
file's bare list of numbers: a list of pass rates in dataset order, since that is what a list of numbers beside a
training set means; a list of objects is read as rows. The recipe is a training config, whose `CoBAConfig` fields set
the run previewed; its other keys must be ones a training config has. Every bad input is refused in one line that
names the flag or file and the fix: a missing, empty, unreadable or other-format file, a missing column, a value that
is no pass rate, an unknown recipe key (with the closest keys).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
from pathlib import Path

from coba_trl.data.sources import LOCAL_SUFFIXES, load_table
from coba_trl.validation import invalid_pass_rates

PASS_RATE_FORMATS = ".parquet, .jsonl or .json file (or a folder of them)"
DATA_SUFFIXES = {".csv", ".tsv", ".txt", ".xlsx", ".xls", ".arrow", ".feather", ".pkl", ".npy"}  # read elsewhere
# How a table of another format becomes one the preview reads, by suffix (`{}`: the file).
CONVERSIONS = {
    ".csv": "datasets.Dataset.from_csv({})",
    ".tsv": "datasets.Dataset.from_csv({}, sep='\\t')",
    ".xlsx": "datasets.Dataset.from_pandas(pandas.read_excel({}))",
    ".xls": "datasets.Dataset.from_pandas(pandas.read_excel({}))",
    ".feather": "datasets.Dataset.from_pandas(pandas.read_feather({}))",
    ".arrow": "datasets.Dataset.from_file({})",
    ".npy": "datasets.Dataset.from_dict({{'pass_rate': numpy.load({}).tolist()}})",
}
# The keys of a training config that the training script reads and the preview does not: its data and rewards.
# With `CoBAConfig`'s, TRL `ModelConfig`'s and the CPU demo's fields, they are the keys a recipe may hold.
TRAINING_SCRIPT_KEYS = (
    "dataset_name",
    "dataset_config",
    "dataset_train_split",
    "instruction",
    "deduplicate",
    "max_train_samples",
    "reward_funcs",
)


def recipe_keys() -> set[str]:
    """The keys a training config may hold: the training script's fields and TRL's `env` section."""
    from trl import ModelConfig

    from coba_trl.config import CoBAConfig
    from coba_trl.demo.config import DemoArguments

    fields = {f.name for kind in (CoBAConfig, ModelConfig, DemoArguments) for f in dataclasses.fields(kind)}
    return fields | set(TRAINING_SCRIPT_KEYS) | {"env"}


def recipe_settings(path: str, prog: str) -> dict:
    """The `CoBAConfig` fields of the training config at `path`; exits with one line on a key no training config
    has (naming the closest ones), or on a file that is missing or no YAML mapping."""
    from coba_trl.cli import did_you_mean, fail, read_config
    from coba_trl.config import CoBAConfig

    settings = read_config(path, flag="--recipe")
    known = recipe_keys()
    for key in settings:
        if key not in known:
            hint = did_you_mean(str(key).replace("-", "_"), sorted(known), "`")
            fail(f"unknown key `{key}` in recipe {path} (--recipe){hint}", prog)
    coba = {f.name for f in dataclasses.fields(CoBAConfig)}
    return {key: value for key, value in settings.items() if key in coba}


def read_pass_rates(source: str, column: str) -> list:
    """The pass rates of `source` in dataset order (None = unknown): its `column`, or the numbers of a .json file
    that holds a bare list. A ValueError (one line, naming the fix) for a file that is missing, empty, of another
    format or unreadable, a missing column, and a value that is no pass rate."""
    path = Path(source).expanduser()
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in LOCAL_SUFFIXES) if path.is_dir() else [path]
    looks_local = path.suffix.lower() in LOCAL_SUFFIXES.keys() | DATA_SUFFIXES or source.startswith(("/", ".", "~"))
    if not path.exists() and looks_local:  # not a Hub id
        raise ValueError(
            f"pass_rates: {source} does not exist; pass an existing {PASS_RATE_FORMATS}, such as the "
            "train_pass_rates.parquet that examples/evaluate.py --train_dataset writes, or a Hub dataset id."
        )
    if path.is_file() and path.suffix.lower() not in LOCAL_SUFFIXES:
        reader = CONVERSIONS.get(path.suffix.lower())
        fix = (
            f"convert it: {reader.format(repr(source))}.to_parquet('pass_rates.parquet')"
            if reader
            else "pass the train_pass_rates.parquet that examples/evaluate.py --train_dataset writes"
        )
        raise ValueError(
            f"pass_rates: {source} is a {path.suffix or 'suffix-less'} file, and the preview reads a "
            f"{PASS_RATE_FORMATS} or a Hub dataset; {fix}."
        )
    for file in files if path.exists() else []:
        if _is_empty(file):
            raise ValueError(f"pass_rates: {file} is empty; pass a {PASS_RATE_FORMATS} with one row per prompt.")
        values = _bare_list(file)
        if values is not None and file != path:
            raise ValueError(f"pass_rates: {file} in {source} holds a bare JSON list; pass that file by itself.")
        if values is not None:
            if column != "pass_rate":
                raise ValueError(
                    f"pass_rates: {source} holds a bare list of pass rates, which has no columns; drop "
                    f"--pass_rate_column {column}, or write rows ({{{column!r}: 0.5, ...}})."
                )
            return _checked(values, f"the list of pass rates in {source}", "")
    try:
        with _quiet_datasets():
            table = load_table(source)
    except ValueError as error:
        raise ValueError(f"pass_rates: {error}") from error
    if column not in table.column_names:
        raise ValueError(
            f"--pass_rate_column is {column!r}, but {source} has no such column (columns: {table.column_names}); "
            "pass --pass_rate_column with the column of pass rates."
        )
    if len(table) == 0:
        raise ValueError(f"pass_rates: {source} has no rows; pass a {PASS_RATE_FORMATS} with one row per prompt.")
    fix = " If another column holds them, pass --pass_rate_column with its name."
    return _checked(table[column], f"--pass_rate_column {column!r} of {source}", fix)


def _is_empty(file: Path) -> bool:
    """Whether `file` holds nothing but white space."""
    with open(file, "rb") as handle:
        return not handle.read(1 << 16).strip() and file.stat().st_size <= 1 << 16


def _bare_list(file: Path) -> list | None:
    """The items of a .json file that holds a JSON list of anything but rows (objects); None for any other file."""
    if file.suffix.lower() != ".json":
        return None
    with open(file, "rb") as handle:
        if handle.read(1 << 16).lstrip()[:1] != b"[":
            return None
    try:
        items = json.loads(file.read_text())
    except ValueError as error:
        raise ValueError(f"pass_rates: {file} is not valid JSON ({error}); fix it or write it again.") from error
    if not isinstance(items, list) or (items and all(isinstance(item, dict) for item in items)):
        return None  # rows: datasets reads each object's keys as columns
    if not items:
        raise ValueError(f"pass_rates: {file} holds an empty list; pass a list with one pass rate per prompt.")
    return items


def _checked(values: list, what: str, fix: str) -> list:
    bad = invalid_pass_rates(values)
    if bad:
        row, value = bad[0]
        raise ValueError(
            f"{what} must hold pass rates in [0, 1], or null / NaN where unknown; {len(bad)} row(s) do not, the "
            f"first is row {row} with {value!r}. If they are percentages, divide them by 100.{fix}"
        )
    return list(values)


@contextlib.contextmanager
def _quiet_datasets():
    """No progress bars or error logs from `datasets` while it reads the file (its errors come back as one line)."""
    import datasets

    bars, level = datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)
        if bars:
            datasets.enable_progress_bars()


def recipe_path(argv: list[str], prog: str) -> str | None:
    """The file after `--recipe` (or `--recipe=`) in `argv`, or None."""
    from coba_trl.cli import fail

    parser = argparse.ArgumentParser(prog=prog, add_help=False)
    parser.error = functools.partial(fail, prog=prog)
    parser.add_argument("--recipe")
    return parser.parse_known_args(argv)[0].recipe
