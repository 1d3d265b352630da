"""rocketbox sidecar (built by a later issue)."""
