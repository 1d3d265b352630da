"""The reliable-producer sidecar: an app's sends stored by the broker, or spooled to the durable
outbox and resent (sidecar.py starts its parts)."""
