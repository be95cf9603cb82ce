"""Clients of a running endpoint: chat, bench, bring-up certificates."""
