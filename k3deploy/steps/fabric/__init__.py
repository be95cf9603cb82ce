"""The fabric: preflight's InfiniBand and topology findings, the pairwise mesh."""
