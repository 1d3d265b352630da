"""The broker's message store: CommitLog, ConsumeQueue, IndexFile, flush, dispatch, recovery."""
