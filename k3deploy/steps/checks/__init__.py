"""Preflight and what it reads across the nodes: reachability, sameness, the Hub's reach."""
