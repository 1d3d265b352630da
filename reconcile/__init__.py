"""The reconciliation: a PySpark job proving from the commitlog that nothing acknowledged was
lost (DESIGN §4; job.py is the entry point)."""
