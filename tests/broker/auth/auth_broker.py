"""A real ``rocketbox broker --auth`` for integration tests, its users made with ``rocketbox acl``
as its bootstrap admin (the tests of the official clients, the Node client and the sidecar)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner, Result

from rocketbox.cli import main
from tests.broker.broker_process import BrokerProcess

ADMIN = ("root", "root-secret-key")
# A user: its secret key and its rules, (resource, actions) each.
Users = dict[str, tuple[str, list[tuple[str, str]]]]


def acl(*args: str, admin: tuple[str, str] = ADMIN, stdin: str | None = None) -> Result:
    """``rocketbox acl ARGS`` in this process, signed as ``admin``."""
    env = {"ROCKETBOX_ACCESS_KEY": admin[0], "ROCKETBOX_SECRET_KEY": admin[1]}
    return CliRunner().invoke(main, ["acl", *args], env=env, input=stdin)


def make_user(
    broker: BrokerProcess, name: str, secret: str, rules: Iterable[tuple[str, str]]
) -> None:
    made = acl("user", "create", name, "--secret-file", "-", "--broker", broker.endpoint,
               stdin=secret)  # fmt: skip
    assert made.exit_code == 0, made.output
    for resource, actions in rules:
        granted = acl("grant", name, resource, "--action", actions, "--broker", broker.endpoint)
        assert granted.exit_code == 0, granted.output


@contextmanager
def auth_broker(
    data_dir: Path, users: Users, *args: str, metrics: bool = False
) -> Iterator[BrokerProcess]:
    """The broker (its admin from a file beside ``data_dir``) with ``users`` made; stopped on
    exit (cleanly, or the test fails)."""
    admin_file = data_dir.parent / f"{data_dir.name}-admin.credentials"
    admin_file.write_text(f"access_key={ADMIN[0]}\nsecret_key={ADMIN[1]}\n")
    broker = BrokerProcess(
        data_dir, "--auth", "--auth-admin-file", str(admin_file), *args, metrics=metrics
    )
    try:
        for name, (secret, rules) in users.items():
            make_user(broker, name, secret, rules)
        yield broker
    finally:
        broker.stop()
