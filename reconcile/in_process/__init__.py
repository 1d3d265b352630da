"""The in-process engine: the reconciliation in Arrow and numpy, without a JVM (config.py)."""
