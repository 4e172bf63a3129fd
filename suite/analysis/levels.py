"""The suite's statistical levels, in one place: every test, family, bound and interval reads them
from here, so that changing the level here changes every verdict that uses it (a test checks that
no other module of the suite writes a level as a number).

- `ALPHA`: the level of every test and of every family of tests (its error rate, 5 %);
- `CONFIDENCE`: every interval's coverage and every "would likely have shown" bound (95 %);
- `IN_LAUNCH_ALPHA`: the level of a control tried inside one launch before the matrix's correction
  (requests are cheap there, so it asks for more than the launch rows' `ALPHA`).
"""

from __future__ import annotations

ALPHA = 0.05
CONFIDENCE = 1.0 - ALPHA
IN_LAUNCH_ALPHA = 0.01


def percent(share: float, space: bool = False) -> str:
    """A level as the pages write it: '95%', '5%', '99.2%' (`space`: '95 %', as some sentences do)."""
    p = share * 100
    number = f"{p:.0f}" if round(p, 1) == round(p) else f"{p:.1f}"
    return f"{number} %" if space else f"{number}%"
