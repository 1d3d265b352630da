"""What can go wrong asking RocketMQ's NameServer or brokers over the remoting protocol.

    RemotingError              the question got no trustworthy answer; never retried here: the
    │                          lookup that asked answers "unknown" and the entry is resent
    │                          unchecked (at least once)
    ├── RemotingConnectError   no connection to the address in time (refused, unreachable)
    ├── RemotingClosedError    the connection ended (EOF, reset) before the answer came
    ├── RemotingProtocolError  bytes that are not a remoting command: a bad frame length, a
    │                          header that does not decode, a body that is not what the request
    │                          code answers (a route, messages, a table)
    └── RemotingAnswerError    a well-formed answer whose response code is not the one hoped for
                               (``code``, ``remark``): SYSTEM_ERROR, NO_PERMISSION, ...

A timeout is the builtin TimeoutError. Each error names the address it came from.
"""

from __future__ import annotations


class RemotingError(Exception):
    retriable = False


class RemotingConnectError(RemotingError):
    pass


class RemotingClosedError(RemotingError):
    pass


class RemotingProtocolError(RemotingError):
    pass


class RemotingAnswerError(RemotingError):
    def __init__(self, address: str, request_code: int, code: int, remark: str | None) -> None:
        super().__init__(
            f"{address} answered request {request_code} with code {code}: {remark or '(no remark)'}"
        )
        self.code = code
        self.remark = remark
