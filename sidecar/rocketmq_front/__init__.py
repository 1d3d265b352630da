"""The sidecar's RocketMQ front: apache.rocketmq.v2.MessagingService on ``--rocketmq-listen``.

An app already written against an official RocketMQ 5 SDK points its endpoint here instead of at
a proxy and gains the outbox with no code change:

- SendMessage (normal, FIFO, delay) goes through the same intake as rocketbox.v1: STORED is OK
  with the broker's offset, SPOOLED is OK with the message id (durable; its offset is not known
  yet), REJECTED is the protocol's code and message (send.py);
- QueryRoute answers the topic's real queues with this front as their endpoint (route.py), so
  every later call of the client comes here;
- Telemetry, Heartbeat and NotifyClientTermination keep a producer working while the broker is
  away (telemetry.py);
- everything else (transactions, the consumer side, offsets) is forwarded to the broker with the
  app's own metadata (credentials, namespace, client id) unchanged (forward.py);
- with the apps' access keys (``--front-credentials-file``), every call's RocketMQ signature is
  verified first (auth.py).
"""
