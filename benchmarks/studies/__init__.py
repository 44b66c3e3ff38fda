"""The studies: pre-registered comparisons of allocators on the CPU task, one declaration each in `protocols/`.

    python benchmarks/studies/runner.py <name>                 # warm starts, every arm x unit, then its page
    python benchmarks/studies/runner.py <name> --report_only   # regenerate docs/studies/<name>.md from the raw runs

`declaration.py` says what a study declares; `runner.py` schedules a study's runs and `run.py` does one (with the
study-only arms of `arms.py`, the stopping rule of `budget.py` and the records of `records.py`); `analysis.py` holds
the statistics and verdict words, and `report/` writes a study's page from its raw runs.
"""
