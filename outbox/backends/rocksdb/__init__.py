"""The RocksDB outbox (``rocksdb://``): one sidecar's embedded store on its own disk."""
