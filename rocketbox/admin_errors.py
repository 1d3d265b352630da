"""How a failed admin call reaches the operator, written once for every command that calls one of
rocketbox's own admin services: ``topic``, ``group``, ``message``, ``flow-control`` and ``acl``
(the broker's) and ``cluster`` (the NameServer's).

An ``AdminCallError`` (admin_client.py) becomes::

    AdminCommandError       FAILED_EXIT_CODE       the endpoint answered an error: code, details
    BrokerUnreachableError  UNREACHABLE_EXIT_CODE  not reached, or no answer in time
    NotServedError          NOT_SERVED_EXIT_CODE   the endpoint does not serve the service
                                                   (UNIMPLEMENTED): one line naming the mqadmin
                                                   command that does the same on Apache RocketMQ

An Apache RocketMQ proxy serves only apache.rocketmq.v2 (send, consume), and its NameServer
speaks RocketMQ's remoting protocol: these commands are rocketbox's alone, and each one's --help
says so (``AdminGroup``, ``AdminCommand``) in the words its failure uses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

from rocketbox.admin_client import BROKER_ADMIN_SERVICE, NAMESRV_SERVICE, AdminCallError
from rocketbox.exit_codes import FAILED_EXIT_CODE, NOT_SERVED_EXIT_CODE, UNREACHABLE_EXIT_CODE

# What does the same on Apache RocketMQ, by command path below the root; a path not listed takes
# its nearest listed parent's. The option letters are mqadmin's own.
MQADMIN_EQUIVALENTS: dict[tuple[str, ...], str] = {
    ("topic",): "mqadmin updateTopic, topicList, topicStatus or deleteTopic",
    ("topic", "create"): "mqadmin updateTopic -n <namesrv> -c <cluster> -t <topic>",
    ("topic", "list"): "mqadmin topicList -n <namesrv>",
    ("topic", "describe"): "mqadmin topicStatus -n <namesrv> -t <topic>",
    ("topic", "delete"): "mqadmin deleteTopic -n <namesrv> -c <cluster> -t <topic>",
    ("group",): "mqadmin updateSubGroup, consumerProgress, resetOffsetByTime or deleteSubGroup",
    ("group", "create"): "mqadmin updateSubGroup -n <namesrv> -c <cluster> -g <group>",
    ("group", "delete"): "mqadmin deleteSubGroup -n <namesrv> -c <cluster> -g <group>",
    ("group", "list"): "mqadmin consumerProgress -n <namesrv>",
    ("group", "describe"): "mqadmin consumerProgress -n <namesrv> -g <group>",
    ("group", "reset-offset"): (
        "mqadmin resetOffsetByTime -n <namesrv> -g <group> -t <topic> -s <now|timestamp-ms>"
    ),
    ("message",): "mqadmin queryMsgById or queryMsgByKey",
    ("message", "get"): "mqadmin queryMsgById -n <namesrv> -i <message id>",
    ("message", "query"): "mqadmin queryMsgByKey -n <namesrv> -t <topic> -k <key>",
    # RocketMQ has no forced flow control; a read-only topic (perm 4; 6 restores) refuses sends.
    ("flow-control",): (
        "mqadmin updateTopicPerm -n <namesrv> -c <cluster> -t <topic> -p 4 (read-only; -p 6 "
        "restores)"
    ),
    ("acl",): "mqadmin createUser, listUser, deleteUser, createAcl, listAcl or deleteAcl",
    ("acl", "user", "create"): (
        "mqadmin createUser -n <namesrv> -c <cluster> -u <user> -p <password>"
    ),
    ("acl", "user", "list"): "mqadmin listUser -n <namesrv> -c <cluster>",
    ("acl", "user", "delete"): "mqadmin deleteUser -n <namesrv> -c <cluster> -u <user>",
    ("acl", "grant"): (
        "mqadmin createAcl -n <namesrv> -c <cluster> -s User:<user> -r <resource> "
        "-a <actions> -d Allow"
    ),
    ("acl", "revoke"): ("mqadmin deleteAcl -n <namesrv> -c <cluster> -s User:<user> -r <resource>"),
    ("acl", "list"): "mqadmin listAcl -n <namesrv> -c <cluster>",
    ("cluster",): "mqadmin clusterList -n <namesrv>",
}
# Which rocketbox server serves each service.
_SERVERS = {BROKER_ADMIN_SERVICE: "broker", NAMESRV_SERVICE: "NameServer"}


class AdminCommandError(click.ClickException):
    exit_code = FAILED_EXIT_CODE


class BrokerUnreachableError(click.ClickException):
    exit_code = UNREACHABLE_EXIT_CODE


class NotServedError(click.ClickException):
    exit_code = NOT_SERVED_EXIT_CODE


def command_names(ctx: click.Context | None) -> tuple[str, ...]:
    """The path of the command ``ctx`` runs, from its top-level command down: ("topic",
    "create"); empty when no admin command is running."""
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.command.name or "")
        ctx = ctx.parent
    names.reverse()
    tops = {path[0] for path in MQADMIN_EQUIVALENTS}
    while names and names[0] not in tops:
        names.pop(0)
    return tuple(names)


def mqadmin_equivalent(names: tuple[str, ...]) -> str:
    for length in range(len(names), 0, -1):
        if names[:length] in MQADMIN_EQUIVALENTS:
            return MQADMIN_EQUIVALENTS[names[:length]]
    return "mqadmin"


def _service_of(names: tuple[str, ...]) -> str:
    return NAMESRV_SERVICE if names[:1] == ("cluster",) else BROKER_ADMIN_SERVICE


def not_served_line(endpoint: str, service: str, names: tuple[str, ...]) -> str:
    """The one line for an endpoint that lacks ``service``, run as command ``names``."""
    command = " ".join(("rocketbox", *names[:1]))
    return (
        f"{endpoint} does not serve {service}: `{command}` works only against a rocketbox "
        f"{_SERVERS[service]}; on Apache RocketMQ use {mqadmin_equivalent(names)}"
    )


def help_note(names: tuple[str, ...]) -> str:
    """The last paragraph of these commands' --help: the same fact as the failure's line."""
    service = _service_of(names)
    return (
        f"Works only against a rocketbox {_SERVERS[service]}: it calls {service}, which Apache "
        f"RocketMQ does not serve (exit {NOT_SERVED_EXIT_CODE} there). On Apache RocketMQ use "
        f"{mqadmin_equivalent(names)}."
    )


def command_error(e: AdminCallError) -> click.ClickException:
    """``e`` as the running command reports it: its exit code and its line."""
    if e.unreachable:
        return BrokerUnreachableError(str(e))
    if e.not_served:
        names = command_names(click.get_current_context(silent=True))
        return NotServedError(not_served_line(e.endpoint, e.service, names))
    return AdminCommandError(str(e))


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Runs the body of an admin command: an AdminCallError leaves it as ``command_error``."""
    try:
        yield
    except AdminCallError as e:
        raise command_error(e) from e


def _write_help_note(ctx: click.Context, formatter: click.HelpFormatter) -> None:
    formatter.write_paragraph()
    with formatter.indentation():
        formatter.write_text(help_note(command_names(ctx)))


class AdminCommand(click.Command):
    """A command of one of rocketbox's admin services: its --help ends with ``help_note``."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        _write_help_note(ctx, formatter)


class AdminGroup(click.Group):
    """A group of such commands: itself, its commands and its subgroups end their --help with
    ``help_note``."""

    command_class = AdminCommand
    group_class = type  # a subgroup is an AdminGroup too

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        _write_help_note(ctx, formatter)
