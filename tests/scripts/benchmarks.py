"""Import a script of `benchmarks/` as a module (the benchmarks import each other by name from that folder, and the
study machinery as the package `studies`)."""

import importlib
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


def load_benchmark(name: str):
    """`benchmarks/<name>.py` (a dotted name: a module of a package there) as a module, with the benchmarks folder on
    `sys.path`."""
    folder = os.path.abspath(BENCHMARKS)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)
