"""The RocksDB outbox (``rocksdb://``): one sidecar's embedded store on its own disk.

outbox.py   ``RocksDBOutbox``: the contract's claims, settlements and reads; what it promises
store.py    the database: open, the batch write, rocksdict's errors, a full disk
indexes.py  how the indexes and the in-memory state move with each transition
puts.py     group-committed puts
bulk_changes.py  requeue, retry_now and purge, in bounded batches
layout.py   the keys;  codec.py  the entry value;  state.py  what is kept in memory
"""
