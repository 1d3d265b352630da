"""The command line's conventions, over every command: ``rocketbox --version`` from the installed
distribution; each command's summary in its group's --help a whole sentence, never cut; every
--log-level logging names, ERROR and CRITICAL included; every option's environment variable named
by one rule (rocketbox/envvars.py), shown in --help, applied to commands added later, and read by
a real server process; counts worded "1 entry", "2 entries".
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rocketbox.cli import COMMANDS, main
from rocketbox.envvars import RocketboxGroup, commands_of
from rocketbox.wording import noun_form, plural
from tests.broker.broker_process import READY_LINE, SMALL_STORE_ARGS
from tests.rocketbox_process import RocketboxProcess

# click's --help at 80 columns: the formatter's width is 78; a summary gets what the longest
# command name in its group and the 6 columns of indentation and gap leave.
HELP_WIDTH = 78
SERVERS = {"broker", "namesrv", "sidecar", "up"}
SHARED = {"--broker": "ROCKETBOX_BROKER", "--sidecar": "ROCKETBOX_SIDECAR"}
SHARED["--outbox"] = "ROCKETBOX_OUTBOX"
SHARED["--namesrv"] = "ROCKETBOX_NAMESRV"
SHARED["--sidecar-tls-ca"] = "ROCKETBOX_SIDECAR_TLS_CA"


def walk(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in commands_of(command).items():
            yield from walk(sub, (*path, name))


def test_version_is_the_installed_distributions() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"rocketbox {version('rocketbox')}\n"


def test_every_summary_is_a_whole_sentence_that_fits() -> None:
    for path, group in walk(main):
        if not isinstance(group, click.Group):
            continue
        commands = commands_of(group)
        limit = HELP_WIDTH - 6 - max(len(name) for name in commands)
        for name, command in commands.items():
            summary = command.get_short_help_str(limit)
            where = " ".join(("rocketbox", *path, name))
            assert not summary.endswith("..."), f"{where}: summary cut: {summary!r}"
            assert summary[:1].isupper(), f"{where}: {summary!r}"
            assert summary.endswith("."), f"{where}: {summary!r}"


def test_the_top_level_help_cuts_no_summary_and_says_how_to_complete() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    commands = result.output.split("Commands:")[1]
    assert "..." not in commands
    assert 'eval "$(_ROCKETBOX_COMPLETE=bash_source rocketbox)"' in result.output


@pytest.mark.parametrize("level", ["ERROR", "CRITICAL"])
@pytest.mark.slow
def test_log_level_takes_error_and_critical(level: str) -> None:
    # In a process of its own: the root logger is process-wide, and pytest's is in this one.
    script = (
        "import logging, sys\n"
        "from rocketbox.cli import main\n"
        "main(sys.argv[1:], standalone_mode=False)\n"
        "print(logging.getLevelName(logging.getLogger().level))\n"
    )
    argv = [sys.executable, "-c", script, "--log-level", level, "topic", "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == level


def expected_envvar(path: tuple[str, ...], option: click.Option) -> str:
    """The rule restated: a shared name for a client's connection, else command path + option."""
    long_name = next(o for o in option.opts if o.startswith("--"))
    if long_name in SHARED and (not path or path[0] not in SERVERS):
        return SHARED[long_name]
    words = [*path, long_name[2:]]
    return "_".join(["ROCKETBOX", *(w.replace("-", "_").upper() for w in words)])


def test_every_option_is_read_from_the_variable_the_rule_names() -> None:
    checked = 0
    for path, command in walk(main):
        names: list[str] = []
        for param in command.params:
            if not isinstance(param, click.Option) or not param.expose_value:
                continue
            where = f"rocketbox {' '.join(path)} {param.opts[0]}"
            if param.hidden:
                assert param.envvar is None, f"{where}: a hidden test hook read from the env"
                continue
            assert param.envvar == expected_envvar(path, param), where
            assert param.show_envvar, f"{where}: its variable is not shown in --help"
            names.append(param.envvar)
            checked += 1
        assert len(names) == len(set(names)), f"rocketbox {' '.join(path)}: a variable twice"
    assert checked > 100  # every command's options, not a few
    sidecar = commands_of(main)["sidecar"]
    outbox = next(p for p in sidecar.params if p.name == "outbox_url")
    assert outbox.envvar == "ROCKETBOX_SIDECAR_OUTBOX"  # the long option, not the parameter
    stats = commands_of(main)["outbox"]
    assert isinstance(stats, click.Group)
    stats_outbox = next(p for p in stats.commands["stats"].params if p.name == "outbox_url")
    assert stats_outbox.envvar == "ROCKETBOX_OUTBOX"


def test_a_command_added_later_follows_the_rule() -> None:
    @click.group(cls=RocketboxGroup)
    def root() -> None:
        pass

    @click.command("send")
    @click.option("--sidecar", "endpoint", envvar="SOMETHING_ELSE")
    @click.option("--message-group", "group")
    def send(endpoint: str, group: str) -> None:
        pass

    root.add_command(send)
    by_name = {p.name: p for p in send.params if isinstance(p, click.Option)}
    assert by_name["endpoint"].envvar == "ROCKETBOX_SIDECAR"
    assert by_name["group"].envvar == "ROCKETBOX_SEND_MESSAGE_GROUP"
    help_text = CliRunner().invoke(root, ["send", "--help"]).output
    assert "ROCKETBOX_SEND_MESSAGE_GROUP" in help_text


@pytest.mark.slow
def test_a_variable_sets_a_servers_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rocketbox broker` with only variables for --listen and --data-dir: the default port
    (8081) is held by the test session, so a ready broker is listening where the variable said."""
    data_dir = tmp_path / "from-env"
    monkeypatch.setenv("ROCKETBOX_BROKER_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("ROCKETBOX_BROKER_DATA_DIR", str(data_dir))
    broker = RocketboxProcess("broker", READY_LINE, ["broker", *SMALL_STORE_ARGS])
    try:
        assert broker.port not in (0, 8081)
        assert (data_dir / "commitlog").is_dir()
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("count", "noun", "expected"),
    [
        (0, "entry", "0 entries"),
        (1, "entry", "1 entry"),
        (2, "entry", "2 entries"),
        (1, "message", "1 message"),
        (3, "message", "3 messages"),
        (1, "byte", "1 byte"),
        (2, "key", "2 keys"),
        (2, "extra copy", "2 extra copies"),
        (2, "index", "2 indexes"),
    ],
)
def test_plural(count: int, noun: str, expected: str) -> None:
    assert plural(count, noun) == expected


def test_plural_groups_thousands_and_takes_an_irregular_plural() -> None:
    assert plural(1_024, "record", grouped=True) == "1,024 records"
    assert plural(1, "record", grouped=True) == "1 record"
    assert noun_form(2, "child", "children") == "children"
    assert noun_form(1, "child", "children") == "child"


@pytest.mark.slow
def test_each_command_is_imported_only_when_it_is_used() -> None:
    """``rocketbox --version`` imports none of the servers: the root names its commands by
    module and imports one when it is looked up."""
    script = (
        "import sys\n"
        "from rocketbox.cli import main\n"
        "main(sys.argv[1:], standalone_mode=False)\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'broker', 'sidecar', 'outbox', 'reconcile', 'namesrv', "
        "'pyarrow', 'grpc'}))\n"
    )
    argv = [sys.executable, "-c", script, "--version"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_every_command_the_root_names_is_the_click_command_of_that_name() -> None:
    commands = commands_of(main)
    assert sorted(commands) == sorted(COMMANDS)
    for name, command in commands.items():
        assert command.name == name, f"{COMMANDS[name]} is the command {command.name!r}"
