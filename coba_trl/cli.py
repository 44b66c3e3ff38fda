"""What the example scripts say about a command line they cannot use, each in one line on stderr (exit status 2, as
argparse uses for usage errors): an unknown flag or `--config` key, with the nearest field; a value that is not one
of its field's choices, with the choices; a config file that is missing or is not a YAML mapping, with its path; a
`--resume_from_checkpoint` folder that does not exist or is a run's output folder, with the checkpoints there are.

TRL's `TrlParser` reads the `--config` file and the flags; these checks run before it, so its messages (a list of
unknown arguments, a `FileNotFoundError` traceback) are never the ones a user meets. Torch-free: the scripts read
the config file before they import torch, and check the names it and the flags use against the fields read from the
dataclasses' source, and their values against the choices written there (`check_names_before_import`), before they
import the dataclasses' modules.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import os
import re
import sys
from typing import NoReturn

import yaml

from coba_trl.declared_fields import Reference, declared_choices, declared_field_names

CONFIG_FLAG = "--config"


def fail(message: str, prog: str | None = None) -> NoReturn:
    """Print `<prog>: error: <message>` on one line and exit with status 2."""
    prog = prog or os.path.basename(sys.argv[0])
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def config_path(argv: list[str]) -> str | None:
    """The file after `--config` in `argv` (the one form TRL reads), or None."""
    if CONFIG_FLAG not in argv:
        return None
    index = argv.index(CONFIG_FLAG)
    if index + 1 == len(argv) or argv[index + 1].startswith("--"):
        fail("--config needs the path of a YAML file, e.g. --config recipes/cpu_demo.yaml.")
    return argv[index + 1]


def read_config(path: str, flag: str = CONFIG_FLAG) -> dict:
    """The settings of the config file at `path` (given as `flag`); exits with one line when it is missing or not a
    YAML mapping."""
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        fail(f"config file {path} {what} ({flag} {path}); pass the path of a YAML file, e.g. recipes/cpu_demo.yaml.")
    try:
        with open(path) as handle:
            settings = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        fail(f"config file {path} is not valid YAML{line}: {getattr(error, 'problem', None) or error}.")
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        fail(f"config file {path} must hold `field: value` lines (a YAML mapping), not a {type(settings).__name__}.")
    return settings


def settings_from_config(argv: list[str]) -> dict:
    """The settings of `argv`'s `--config` file ({} without one)."""
    path = config_path(argv)
    return {} if path is None else read_config(path)


def did_you_mean(name: str, candidates: list[str], quote: str) -> str:
    """`; did you mean <the closest candidates>?` for a misspelled `name`, or where --help lists them."""
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if not close:
        return "; --help lists every option."
    return f"; did you mean {' or '.join(f'{quote}{c}{quote}' for c in close)}?"


def field_names(parser: argparse.ArgumentParser) -> list[str]:
    """The fields of the parser's dataclasses (what a config file may set), plus TRL's `env` section."""
    return sorted({f.name for kind in parser.dataclass_types for f in dataclasses.fields(kind)} | {"env"})


def _check_config_keys(known: list[str], argv: list[str], prog: str | None) -> None:
    path = config_path(argv)
    if path is None:
        return
    for key in read_config(path):
        if key not in known:
            hint = did_you_mean(str(key).replace("-", "_"), known, "`")
            fail(f"unknown key `{key}` in config file {path}{hint}", prog)


def check_config_keys(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Exit on the first key of the `--config` file that is no field, naming the file and the nearest fields."""
    _check_config_keys(field_names(parser), argv, parser.prog)


def _check_flags(known: set[str], suggested: list[str], argv: list[str], prog: str | None) -> None:
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            fail(f"unknown option {flag}{did_you_mean('--' + flag[2:].replace('-', '_'), suggested, '')}", prog)


def check_flag_names(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Exit when a flag of `argv` is misspelled or only a prefix of one (the scripts' parsers take no abbreviations:
    `--max_generation` is not silently `--max_generations`), naming it and the closest valid flags."""
    known = {CONFIG_FLAG} | {option for action in parser._actions for option in action.option_strings}
    spelled = sorted(option for option in known if "-" not in option[2:])  # --max_steps, not also --max-steps
    _check_flags(known, spelled, argv, parser.prog)


def check_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Every flag of `argv` and every key of its `--config` file names a field of `parser`; the file exists."""
    check_flag_names(parser, argv)
    check_config_keys(parser, argv)


def check_names_before_import(argv: list[str], classes: list[Reference]) -> None:
    """`check_command_line` against the fields of the dataclasses `classes` (module and class names) read from their source, so
    a misspelt flag or config key is refused before those modules (transformers, torch) are imported. Any flag of a
    field passes here (`--no_FIELD` and `--FIELD-NAME` too): `check_command_line` checks the parser's exact options
    afterwards. A value outside the `choices` written in a field's source is refused here too (`check_choices`). Checks
    nothing when a class cannot be read from source."""
    fields = declared_field_names(classes)
    if fields is None:
        return
    spelled = sorted({CONFIG_FLAG, "--help"} | {f"--{name}" for name in fields})
    known = {*spelled, *(f"--no_{name}" for name in fields)}
    _check_flags(known | {option.replace("_", "-") for option in known}, spelled, argv, None)
    _check_config_keys(sorted(fields | {"env"}), argv, None)
    check_choices(declared_choices(classes), argv)


def _invalid_choice(value: str, choices: tuple[str, ...]) -> str:
    return f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})"


def check_choices(choices: dict[str, tuple[str, ...]], argv: list[str]) -> None:
    """Exit on the first value of `argv` (`--FIELD VALUE` or `--FIELD=VALUE`; a list field's first) or of its `--config`
    file that is not one of its field's `choices` (`declared_choices`), in the parser's words: the field, the value,
    the choices. A config value that is no string (a list's) is left to the parser."""
    for token, following in itertools.pairwise([*argv, None]):
        flag, equals, value = token.partition("=")
        name = flag[2:].replace("-", "_")
        if not flag.startswith("--") or name not in choices:
            continue
        value = value if equals else following
        if value is not None and not value.startswith("--") and value not in choices[name]:
            option = f"--{name}" + (f"/--{name.replace('_', '-')}" if "_" in name else "")
            fail(f"argument {option}: {_invalid_choice(value, choices[name])}")
    path = config_path(argv)
    for key, value in ({} if path is None else read_config(path)).items():
        if key in choices and isinstance(value, str) and value not in choices[key]:
            fail(f"config file {path}: {key}: {_invalid_choice(value, choices[key])}")


def requested_model(argv: list[str]) -> str | None:
    """`model_name_or_path` from the command line, else from the `--config` file, else None."""
    probe = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    probe.add_argument("--model_name_or_path", "--model-name-or-path")
    known, _ = probe.parse_known_args(argv)
    if known.model_name_or_path is None:
        return settings_from_config(argv).get("model_name_or_path")
    return known.model_name_or_path


LOCAL_MODEL = "a local model directory (a training output_dir, such as outputs/cpu_demo)"


def check_model_path(name: str) -> None:
    """A `model_name_or_path` written as a path (`/...`, `./...`, `../...`, `~...`: never a Hub id) or naming a file:
    a `ValueError` saying it is missing, or a file, unless it is a folder. A `~` is not expanded (transformers does
    not expand it either): a folder written with one that exists once expanded is named in full."""
    if os.path.isdir(name):
        return
    home = os.path.expanduser(name)
    if name.startswith("~") and os.path.isdir(home):
        raise ValueError(
            f"model_name_or_path {name} starts with ~, which is not expanded here (a config file, or a flag written "
            f"--model_name_or_path={name}), so no folder has that name. Pass the folder's full path, {home}."
        )
    if name.startswith(("/", "~", "./", "../", os.sep)) or name in (".", "..") or os.path.isfile(name):
        what = "a file, not a model folder" if os.path.isfile(name) else "missing: no such folder"
        raise ValueError(
            f"model_name_or_path {name} is {what}. Pass {LOCAL_MODEL} that exists, or a Hugging Face Hub id "
            "(Qwen/Qwen2.5-7B-Instruct)."
        )


def check_model_before_import(argv: list[str]) -> None:
    """`check_model_path` on the model `argv` names (flag or `--config` file), before torch is imported: one line,
    exit status 2."""
    name = requested_model(argv)
    if name is not None:
        try:
            check_model_path(name)
        except ValueError as error:
            fail(str(error))


CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")  # the Trainer's checkpoint folders


def checkpoints_in(folder: str) -> list[str]:
    """The `checkpoint-N` folders in `folder`, by step ([] when `folder` is no folder)."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    found = [(int(m.group(1)), name) for name in names if (m := CHECKPOINT_NAME.fullmatch(name))]
    return [name for _, name in sorted(found) if os.path.isdir(os.path.join(folder, name))]


def check_checkpoint_path(path: str) -> None:
    """`--resume_from_checkpoint PATH` (a folder, not `true`): a `ValueError` when PATH does not exist, naming the
    checkpoints next to it, or when it is a run's output folder holding checkpoints, naming them."""
    latest_hint = "or --resume_from_checkpoint true with --output_dir RUN_DIR for the latest complete one there"
    if not os.path.exists(path):
        parent = os.path.dirname(os.path.normpath(path)) or "."
        saved = checkpoints_in(parent)
        if saved:
            there = f"{parent} holds {', '.join(saved)}"
        else:
            there = f"{parent} holds no checkpoint-N folder" if os.path.isdir(parent) else f"{parent} does not exist"
        raise ValueError(
            f"resume_from_checkpoint {path} is missing: no such folder ({there}). Pass an existing checkpoint-N "
            f"folder, {latest_hint}."
        )
    saved = checkpoints_in(path)
    if saved and not CHECKPOINT_NAME.fullmatch(os.path.basename(os.path.normpath(path))):
        raise ValueError(
            f"resume_from_checkpoint {path} is a run's output folder, not a checkpoint; it holds {', '.join(saved)}. "
            f"Pass one of them (--resume_from_checkpoint {os.path.join(path, saved[-1])}), or "
            f"--output_dir {path} --resume_from_checkpoint true for the latest complete one."
        )
