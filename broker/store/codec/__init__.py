"""The commitlog record codec: what a stored message is, and how its bytes are laid out.

- ``message``: the message model (RocketMQ's MessageExt, MessageExtBrokerInner, MessageConst,
  MessageSysFlag);
- ``layout``: the record layout table, its constants and the segment file names;
- ``encode``: a message to record bytes (the put path);
- ``decode``: record bytes back to a message;
- ``check``: is there a valid record at a position (recovery, dispatch);
- ``scan`` and ``scan_columns``: a fast column-wise scan of a whole segment (the reconciliation).

The codec imports nothing of the broker outside this package, so the reconciliation (reconcile/)
reads logs without pulling in the store (docs/design.md §9). Nothing is imported here: ``scan``
needs numpy, which the broker itself never loads.
"""
