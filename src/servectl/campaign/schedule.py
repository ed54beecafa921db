"""The order of a campaign's measurements, pure: rounds of visits, interleaved so drift hits every side alike.

A round visits the incumbent and every variant still being measured once each (a visit measures one repeat at
every point). Odd rounds run forwards (incumbent first), even rounds backwards (incumbent last): the
incumbent-variant order alternates A B / B A across rounds (ABBA), so a slow drift of the host (thermals,
page cache, a neighbour) lands on both sides of each comparison alike, and the incumbent is re-measured in
every round rather than taken from an earlier figure. Two incumbent visits that meet at a round boundary
need no swap between them.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The incumbent's name in a round's order (no variant may take it: variant names are checked against it).
INCUMBENT = "incumbent"


def round_order(round_index: int, active: Sequence[str]) -> list[str]:
    """The visits of round ``round_index`` (1-based): the incumbent and the ``active`` variants, alternating
    direction from round to round."""
    if round_index < 1:
        raise ValueError(f"rounds count from 1, not {round_index}")
    forwards = [INCUMBENT, *active]
    return forwards if round_index % 2 == 1 else forwards[::-1]
