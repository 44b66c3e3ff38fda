"""How the report writes a spread of values in one cell: median [min, max]."""

from __future__ import annotations

import numpy as np


def median_range(values, digits: int = 0, grouping: str = "") -> str:
    """Median [min, max]; `grouping=","` puts thousands separators in."""
    values = np.asarray(values, dtype=float)
    form = f"{grouping}.{digits}f"
    return f"{np.median(values):{form}} [{values.min():{form}}, {values.max():{form}}]"
