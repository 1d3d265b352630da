"""Benchmarks against peers, run from the checkout (``python -m bench.<name>``); not shipped."""
