"""A stand-in Apache RocketMQ 5 proxy (only the public ``apache.rocketmq.v2`` MessagingService,
answering as the proxy does), run as its own process, and rocketbox's acceptance tests against
it. The test-side API is ``rocketmq_proxy`` (proxy_process.py's docstring); the server is
standin.py, its process ``python -m tests.rocketmq_proxy``.
"""

from tests.rocketmq_proxy.config import Topic, TopicMessageType
from tests.rocketmq_proxy.proxy_process import RocketMQProxy, rocketmq_proxy
from tests.rocketmq_proxy.store import StoredMessage

__all__ = ["RocketMQProxy", "StoredMessage", "Topic", "TopicMessageType", "rocketmq_proxy"]
