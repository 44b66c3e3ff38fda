"""Study declarations: one file per pre-registered study, each defining `STUDY`, a `studies.declaration.Study`.

A new study adds only its declaration here; `benchmarks/studies/runner.py <name>` runs it and writes its page.
"""

from __future__ import annotations

import importlib
import os


def declared() -> list[str]:
    """The names of the declarations here, sorted."""
    folder = os.path.dirname(os.path.abspath(__file__))
    return sorted(name[:-3] for name in os.listdir(folder) if name.endswith(".py") and not name.startswith("__"))


def load_study(name: str):
    """The `STUDY` declared in `benchmarks/studies/protocols/<name>.py` (a `studies.declaration.Study`)."""
    if name not in declared():
        raise ValueError(
            f"study {name}: no declaration benchmarks/studies/protocols/{name}.py; one of {', '.join(declared())}"
        )
    return importlib.import_module(f"{__name__}.{name}").STUDY
