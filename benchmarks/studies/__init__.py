"""The studies: pre-registered comparisons of allocators on the CPU task, one declaration each in `protocols/`.

    python benchmarks/studies/runner.py <name>                 # warm starts, every arm x unit, then its page
    python benchmarks/studies/runner.py <name> --report_only   # regenerate docs/studies/<name>.md from the raw runs

`declaration.py` says what a study declares. `runner.py` schedules a study's units: `warm_start.py` prepares a unit's
starting point and `run.py` runs one arm from it (with the problems of `task.py`, the study-only arms of `arms.py`,
the stopping rule of `budget.py` and the records of `records.py`), each raw file where `paths.py` says, with the
machine and commit of `provenance.py`. `analysis.py` holds the statistics and verdict words, and `report/` writes a
study's page from its raw runs.
"""
