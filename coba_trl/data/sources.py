"""Open a table from the Hugging Face Hub or from local parquet / jsonl / json files, as a `datasets.Dataset`.

A local source is recognised by an existing path or by a file suffix; anything else is a Hub id and is fetched only
when a loader is actually called with it. When the Hub cannot be reached (`HF_HUB_OFFLINE`, or its host name does
not resolve) a Hub id fails at once with an error that names it and says how to pass a local file instead, rather
than after the download's retries.
"""

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import datasets
from huggingface_hub import constants

from coba_trl.cli import LOCAL_MODEL, check_model_path

LOCAL_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def is_local(path_or_id: str) -> bool:
    """Whether `path_or_id` names local data: an existing file or folder, or a name ending in a known suffix."""
    path = Path(path_or_id).expanduser()
    return path.exists() or path.suffix.lower() in LOCAL_SUFFIXES


def _local_files(path: Path) -> tuple[str, list[str]]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in LOCAL_SUFFIXES)
    else:
        files = [path]
    if not files or not path.exists():
        raise ValueError(
            f"No data found at '{path}': pass an existing .parquet, .jsonl or .json file (or a folder of them), "
            "or a Hugging Face Hub dataset id."
        )
    builders = {LOCAL_SUFFIXES.get(f.suffix.lower()) for f in files}
    if None in builders or len(builders) != 1:
        raise ValueError(
            f"Cannot read '{path}': expected only .parquet files or only .jsonl/.json files, got "
            f"{sorted({f.suffix for f in files})}."
        )
    return builders.pop(), [str(f) for f in files]


def hub_unreachable() -> str | None:
    """Why the Hub evidently cannot be reached (offline mode, or its host name does not resolve and no proxy is set);
    None otherwise."""
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_DATASETS_OFFLINE", "0").upper() in ("1", "ON", "YES", "TRUE"):
        return "offline mode is on (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)"
    if any(os.environ.get(name) for name in PROXY_VARIABLES):  # the proxy resolves the host, not this machine
        return None
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:
        return f"{host} cannot be resolved ({error.strerror or error}): no network"
    return None


def hub_error(kind: str, name: str, reason: str, local: str) -> ValueError:
    """The error for a Hub `kind` ("dataset", "model") named `name` that could not be fetched."""
    return ValueError(
        f"Cannot load the {kind} {name!r} from the Hugging Face Hub: {reason}. Pass {local} instead, or run where "
        "the Hub is reachable (and without HF_HUB_OFFLINE)."
    )


LOCAL_DATA = "a local .parquet, .jsonl or .json file (or a folder of them)"


def require_hub(kind: str, name: str, local: str) -> str | None:
    """Fail at once when `name` must come from the Hub and the Hub has no host (a download would only retry); returns
    why the Hub is unreachable when offline mode is on (the offline cache may still hold `name`), else None."""
    reason = hub_unreachable()
    if reason is not None and not reason.startswith("offline"):
        raise hub_error(kind, name, reason + "; with HF_HUB_OFFLINE=1 a cached copy is used", local)
    return reason


def check_model_source(name: str) -> None:
    """A model written as a path must be a folder (`coba_trl.cli.check_model_path`); any other name that is no local
    folder comes from the Hub: a `ValueError` at once, before anything loads, when the path is missing, the Hub has no
    host, or offline mode is on and the offline cache does not hold the model."""
    check_model_path(name)
    if os.path.isdir(name):
        return
    reason = require_hub("model", name, LOCAL_MODEL)
    if reason is None:
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not even a Hub id (a path such as outputs/run/model that does not exist)
        cached = False
    if not cached:
        error = hub_error("model", name, f"{reason}, and the offline cache does not hold it", LOCAL_MODEL)
        raise ValueError(f"model_name_or_path {name} is no local folder. {error}")


def _cause(error: BaseException) -> str:
    """The message of the first cause of `error` that says what went wrong (datasets wraps a JSON or Arrow parse
    error in a generic one)."""
    while isinstance(error, datasets.exceptions.DatasetGenerationError) and error.__cause__ is not None:
        error = error.__cause__
    return " ".join(str(error).split()) or type(error).__name__


def load_table(path_or_id: str, config: str | None = None, split: str = "train") -> datasets.Dataset:
    """Load one split of a Hub dataset, or all rows of local parquet / jsonl / json files (then `split` and `config`
    are ignored)."""
    if is_local(path_or_id):
        builder, files = _local_files(Path(path_or_id).expanduser())
        shown = not datasets.utils.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # a local file loads in moments: no progress bar before what follows
        try:
            return datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as error:
            raise ValueError(f"Cannot read {files} as {builder}: {_cause(error)}") from error
        finally:
            if shown:
                datasets.enable_progress_bars()
    reason = require_hub("dataset", path_or_id, LOCAL_DATA)
    try:
        return datasets.load_dataset(path_or_id, config, split=split)
    except (ConnectionError, OSError) as error:  # offline and not cached, no network, no such dataset or split
        detail = f"{type(error).__name__}: {error}"
        raise hub_error("dataset", path_or_id, f"{reason}, {detail}" if reason else detail, LOCAL_DATA) from error
