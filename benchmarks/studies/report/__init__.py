"""A study's page from its raw runs: `pages.py` writes it, with the sections of `seeds.py` (studies 1 and 2) or
`intervals.py` (and its optional sections, `extras.py`), the tables of `tables.py` and the plots of `plots.py`."""
