"""An app on the official RocketMQ Python client (5.1.2) sending one message over TLS to the
endpoint given first, topic second; prints the message id. Run as its own process, with
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH naming the CA to trust: the client offers no way to pass one
(docs/rocketmq-protocol.md §9), and gRPC reads that variable once per process. Exit 1 on any
failure.

Usage: python -m tests.sidecar.official_tls_send HOST:PORT TOPIC
"""

from __future__ import annotations

import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer

REQUEST_TIMEOUT_S = 10


def main() -> int:
    endpoint, topic = sys.argv[1:3]
    producer = Producer(
        ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S),
        (topic,),
        tls_enable=True,
    )
    producer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = b"official python client over TLS"
        receipt = producer.send(message)
        sys.stdout.write(f"{receipt.message_id}\n")
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
