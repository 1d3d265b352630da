"""The ``rocketbox`` command line: its root, the global options, and where each command is.

The commands are the only composition root: each builds its configuration from options (each
also read from an environment variable, named by envvars.py's rule) and passes it down frozen.
Each lives with its concern (up_cli.py, broker_cli.py, broker_admin_cli.py, sidecar_cli.py,
outbox_cli.py, reconcile_cli.py, ...) and is imported only when it is used (``COMMANDS``), so that
a command pays for its own imports and no other's: importing every server made even
``rocketbox --version`` wait for all of them.
"""

from __future__ import annotations

import click

from rocketbox.envvars import RocketboxGroup
from rocketbox.event_loop import EVENT_LOOP_DEFAULT, EVENT_LOOPS
from rocketbox.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from rocketbox.run_settings import RunSettings

# Every command, by name: where it is defined ("module:attribute"), imported when it is used.
COMMANDS = {
    "acl": "rocketbox.acl_cli:acl",
    "broker": "rocketbox.broker_cli:broker",
    "cluster": "rocketbox.cluster_cli:cluster",
    "consume": "rocketbox.consume_cli:consume_command",
    "flow-control": "rocketbox.broker_admin_cli:flow_control",
    "group": "rocketbox.broker_admin_cli:group",
    "message": "rocketbox.broker_admin_cli:message",
    "namesrv": "rocketbox.namesrv_cli:namesrv",
    "outbox": "rocketbox.outbox_cli:outbox_group",
    "reconcile": "rocketbox.reconcile_cli:reconcile_command",
    "send": "rocketbox.send_cli:send_command",
    "sidecar": "rocketbox.sidecar_cli:sidecar_command",
    "topic": "rocketbox.broker_admin_cli:topic",
    "up": "rocketbox.up_cli:up",
}


# `rocketbox --help`'s last lines: shell completion is click's, undocumented otherwise.
EPILOG = """\b
Shell completion (bash; zsh and fish alike, with zsh_source or fish_source):
  eval "$(_ROCKETBOX_COMPLETE=bash_source rocketbox)"
"""


@click.group(
    cls=RocketboxGroup,
    lazy_commands=COMMANDS,
    context_settings={"show_default": True},
    epilog=EPILOG,
)
@click.version_option(package_name="rocketbox", message="rocketbox %(version)s")
@click.option("--log-level", default="INFO", type=click.Choice(LOG_LEVELS))
@click.option(
    "--log-format",
    default="text",
    type=click.Choice(LOG_FORMATS),
    help="json: one object per line, with message_id and topic on lines about a message.",
)
@click.option(
    "--event-loop",
    default=EVENT_LOOP_DEFAULT,
    type=click.Choice(EVENT_LOOPS),
    help="The servers' asyncio loop: uvloop (libuv, cheaper per call) or the standard one.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str, log_format: str, event_loop: str) -> None:
    """rocketbox: a reliable-producer sidecar with a durable retry outbox, and its broker."""
    configure_logging(log_level, log_format)
    ctx.obj = RunSettings(event_loop=event_loop, command=ctx.invoked_subcommand or "")
