"""The Redis outbox (``redis://``, ``rediss://``): several sidecars share it, in Lua scripts."""
