"""The one rule naming the environment variable of every ``rocketbox`` option.

(a) A client-side connection setting has one shared name, whichever command uses it: a command
    that connects to a broker, a sidecar, an outbox or a NameServer as a client reads
    ``--broker`` from ROCKETBOX_BROKER, ``--sidecar`` from ROCKETBOX_SIDECAR, ``--outbox`` from
    ROCKETBOX_OUTBOX, ``--namesrv`` from ROCKETBOX_NAMESRV (and ``--sidecar-tls-ca``, the CA a
    TLS sidecar is verified with, from ROCKETBOX_SIDECAR_TLS_CA), so that one ``export`` aims
    every tool at the same thing.
(b) Every other option is ROCKETBOX_<COMMAND>_<OPTION>, after the command's path and the
    option's first long name (not its Python parameter): ``--outbox`` of ``rocketbox sidecar``
    is ROCKETBOX_SIDECAR_OUTBOX, ``--limit`` of ``rocketbox outbox ls`` is
    ROCKETBOX_OUTBOX_LS_LIMIT, the root's ``--log-level`` is ROCKETBOX_LOG_LEVEL.

The servers (``broker``, ``namesrv``, ``sidecar``, ``up``) take (b) for every option, their
``--broker`` and ``--outbox`` included: a server's settings are its own deployment's (the chart
sets them per container), not a shell's shared aim.

``RocketboxGroup`` applies the rule to each command it is given, and to that command's own
subcommands, when it is added (a command it imports on first use, when it is imported): a new
command is named by the rule without doing anything. An ``envvar=`` written on an option is
replaced, so that the rule has no exceptions. Click's own
``auto_envvar_prefix`` is not used: it names variables after the Python parameter
(ROCKETBOX_SIDECAR_OUTBOX_URL) and would keep those names alive beside these.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

ENVVAR_PREFIX = "ROCKETBOX"
# (a): the long option → its shared variable, on every command that is not a server.
CLIENT_ENVVARS = {
    "--broker": "ROCKETBOX_BROKER",
    "--sidecar": "ROCKETBOX_SIDECAR",
    "--sidecar-tls-ca": "ROCKETBOX_SIDECAR_TLS_CA",
    "--outbox": "ROCKETBOX_OUTBOX",
    "--namesrv": "ROCKETBOX_NAMESRV",
}
# Top-level commands that serve: their every option follows (b).
SERVER_COMMANDS = frozenset({"broker", "namesrv", "sidecar", "up"})


def _upper(name: str) -> str:
    return name.replace("-", "_").upper()


def option_envvar(command_path: tuple[str, ...], option: click.Option) -> str:
    """The variable ``option`` of the command at ``command_path`` (its names below the root:
    ``("outbox", "ls")``; empty for the root itself) is read from."""
    long_names = [o for o in option.opts if o.startswith("--")]
    if not long_names:
        raise ValueError(
            f"option {option.opts} of rocketbox {' '.join(command_path)}: every option needs a "
            "long name, its environment variable is named after it"
        )
    long_name = long_names[0]
    is_server = bool(command_path) and command_path[0] in SERVER_COMMANDS
    if long_name in CLIENT_ENVVARS and not is_server:
        return CLIENT_ENVVARS[long_name]
    parts = [ENVVAR_PREFIX, *(_upper(p) for p in command_path), _upper(long_name[2:])]
    return "_".join(parts)


def name_envvars(command: click.Command, command_path: tuple[str, ...]) -> None:
    """Set (and show in --help) the variable of every option of ``command`` and, for a group,
    of its subcommands, by the rule above."""
    for param in command.params:
        # --version and --help act and exit: they set nothing a variable could carry. A hidden
        # option is a test's hook (a pinned clock), not a setting a deployment should find.
        if isinstance(param, click.Option) and param.expose_value and not param.hidden:
            param.envvar = option_envvar(command_path, param)
            param.show_envvar = True
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            name_envvars(sub, (*command_path, name))


class RocketboxGroup(click.Group):
    """The root group: names its own options' variables, and each command's. A command of
    ``lazy_commands`` (name → ``"module:attribute"``) is imported when it is first looked up,
    and named then."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        name_envvars(self, ())

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        added = name or cmd.name
        assert added is not None, "click names every command it adds"
        name_envvars(cmd, (added,))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module_name, attribute = self.lazy_commands[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name]} is no click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


def commands_of(group: click.Group) -> dict[str, click.Command]:
    """Every command of ``group`` by name, a lazy one imported (what its --help lists)."""
    ctx = click.Context(group)
    found = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None:
            found[name] = command
    return found
