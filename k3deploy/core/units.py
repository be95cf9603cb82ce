"""Byte counts as the CLI prints them: one way in status, the run's progress lines, init's
findings, the download report and preflight's disk check (each had its own before)."""
from __future__ import annotations

GB = 1e9   # decimal, as disk vendors, `df -H` and the Hub's file sizes count
MB = 1e6


def size(n: float) -> str:
    """'1,560.94 GB' from a gigabyte up, else '24.0 MB': a testbed node's share read '0.02 GB'."""
    return f"{n / GB:,.2f} GB" if n >= GB else f"{n / MB:,.1f} MB"
