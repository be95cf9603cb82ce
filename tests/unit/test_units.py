"""core/units.py: the one way the CLI prints a byte count."""
from __future__ import annotations

import pytest

from k3deploy.core import units


@pytest.mark.parametrize(("n", "text"), [
    (0, "0.0 MB"),
    (24_250_000, "24.2 MB"),           # a testbed node's share, not "0.02 GB"
    (999_999_999, "1,000.0 MB"),
    (1_000_000_000, "1.00 GB"),
    (1_560_940_000_000, "1,560.94 GB"),  # the mxfp4 checkpoint
])
def test_a_byte_count_reads_in_megabytes_below_a_gigabyte_and_in_gigabytes_above(n, text):
    assert units.size(n) == text
