"""The broker bench (``python -m bench.broker``; cli.py says what it measures)."""
