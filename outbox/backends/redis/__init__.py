"""The Redis outbox (``redis://``, ``rediss://``, ``redis+sentinel://``, ``redis+cluster://``):
several sidecars share it, in Lua scripts.

outbox.py         ``RedisOutbox``: the contract, a script call per operation; what SPOOLED means
                  on one server, under Sentinel and on a Cluster, with and without WAIT
urls.py           the URLs, the prefix's hash tag, wait_replicas;  keys.py  the key layout
connection.py     the client a URL names, redis-py's errors translated
runner.py         scripts run with every key declared, on the outbox's master, WAIT after writes
fields.py         the entry hash;  puts.py  the put script's arguments and answers
scripts.py        PRELUDE, put and claim;  settle_scripts.py  delivered, bury, reschedule, leases
bulk_and_read_scripts.py  requeue, retry_now, purge, scan, stats and pending_groups
"""
