"""rocketbox reconcile (built by a later issue)."""
