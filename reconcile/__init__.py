"""The reconciliation: a PySpark job proving from the commitlog that nothing acknowledged was
lost (docs/design.md §8; job.py is the entry point)."""
