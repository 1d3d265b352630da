"""The MySQL/MariaDB outbox (``mysql+pymysql://``): several sidecars share it, in one table.

outbox.py        ``MySQLOutbox``: claims, lease expiry and reads; what it promises
connection.py    the engine, the schema at open, driver errors, FIFO group locks
puts.py          group-committed puts;  settlements.py  tombstones, reschedule, bury, release
bulk_changes.py  requeue, retry_now and purge, in bounded transactions
schema.py        the tables and hot statements;  rows.py  the row codec
"""
