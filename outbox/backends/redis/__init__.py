"""The Redis outbox (``redis://``, ``rediss://``): several sidecars share it, in Lua scripts.

outbox.py         ``RedisOutbox``: the contract, one script call per operation; the key layout
connection.py     the client a URL names, script registration, redis-py's errors translated
fields.py         the entry hash;  scripts.py  the put, claim and settlement scripts
bulk_and_read_scripts.py  requeue, retry_now, purge, scan, stats and pending_groups
"""
