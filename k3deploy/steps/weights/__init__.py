"""The verified download: the Hub, the peers' fan-out, the shared cache, restarts."""
