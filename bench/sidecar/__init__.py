"""The sidecar bench (``python -m bench.sidecar``; cli.py says what it measures)."""
