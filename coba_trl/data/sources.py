"""Open a table from the Hugging Face Hub or from local parquet / jsonl / json files, as a `datasets.Dataset`.

A local source is recognised by an existing path or by a file suffix; anything else is a Hub id and is fetched only
when a loader is actually called with it.
"""

from pathlib import Path

import datasets

LOCAL_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


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


def load_table(path_or_id: str, config: str | None = None, split: str = "train") -> datasets.Dataset:
    """Load one split of a Hub dataset, or all rows of local parquet / jsonl / json files (then `split` and `config`
    are ignored)."""
    if is_local(path_or_id):
        builder, files = _local_files(Path(path_or_id).expanduser())
        try:
            return datasets.load_dataset(builder, data_files=files, split="train")
        except Exception as error:
            raise ValueError(f"Cannot read {files} as {builder}: {error}") from error
    return datasets.load_dataset(path_or_id, config, split=split)
