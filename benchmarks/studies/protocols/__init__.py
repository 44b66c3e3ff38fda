"""Study declarations: one file per pre-registered study, each defining `STUDY`, a `studies.declaration.Study`.

A new study adds only its declaration here; `benchmarks/studies/runner.py <name>` runs it and writes its page.
"""

from __future__ import annotations

import importlib


def load_study(name: str):
    """The `STUDY` declared in `benchmarks/studies/protocols/<name>.py` (a `studies.declaration.Study`)."""
    return importlib.import_module(f"{__name__}.{name}").STUDY
