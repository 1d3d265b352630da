"""rocketbox outbox (built by a later issue)."""
