"""The cluster model: inventory and its rules, GPUs, sizing, Hub metadata, fan-out, cost."""
