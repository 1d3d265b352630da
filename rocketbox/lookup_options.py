"""``--lookup-namesrv``: the Apache RocketMQ NameServers whose brokers the sidecar asks, over
RocketMQ's remoting protocol, whether a message that may already be stored was (sidecar/remoting/),
declared once for the commands that run a sidecar. Its value reaches the command as
``uniq_key_lookup``, a UniqKeyLookupConfig or None."""

from __future__ import annotations

import click

from sidecar.remoting import UniqKeyLookupConfig, parse_namesrv_addrs


def _lookup_config(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> UniqKeyLookupConfig | None:
    if not value:
        return None
    try:
        return UniqKeyLookupConfig(parse_namesrv_addrs(value))
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


lookup_namesrv_option = click.option(
    "--lookup-namesrv",
    "uniq_key_lookup",
    default=None,
    callback=_lookup_config,
    metavar="HOST:PORT[;HOST:PORT]",
    help="An Apache RocketMQ cluster's NameServers. Where the --broker endpoint does not offer "
    "rocketbox's lookup by message id (a RocketMQ 5 proxy), a message whose send may have been "
    "stored is looked up on the cluster's brokers by unique key (RocketMQ's remoting protocol, "
    "their port 10911) before it is resent: not resent when found. Unset, or when a broker "
    "cannot say, it is resent unchecked (at least once).",
)
