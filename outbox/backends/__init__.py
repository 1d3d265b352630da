"""The outbox's backends, one module or package each, opened by URL (outbox/factory.py); each keeps
the contract of outbox/outbox.py and declares its ``OutboxFeatures``."""
