"""``rocketbox acl``: the broker's users and their rights, through its AclAdminService
(proto/rocketbox/admin/v1/acl_admin.proto; docs/security.md).

A secret key is never a command-line value (``ps`` and shell histories show those): ``acl user
create`` asks for it at the terminal, or reads it from ``--secret-file`` (``-``: standard input).
Against a broker with --auth, these commands need an admin user's credentials in
ROCKETBOX_ACCESS_KEY and ROCKETBOX_SECRET_KEY. Apache RocketMQ keeps its users and ACLs through
mqadmin instead (rocketbox/admin_errors.py says which command, in --help and on failure).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from rocketbox import admin_client as admin
from rocketbox.admin_errors import AdminGroup
from rocketbox.broker_admin_cli import admin_command, echo_answer
from rocketbox.wording import plural
from rocketbox_api.admin.v1 import acl_admin_pb2 as apb

SECRET_FILE_BYTES_MAX = 4096
ACTIONS = ("PUB", "SUB", "ALL")


def _secret(secret_file: str | None) -> str:
    if secret_file is None:
        secret: str = click.prompt("secret key", hide_input=True, confirmation_prompt=True)
        return secret
    try:
        raw = (
            sys.stdin.read(SECRET_FILE_BYTES_MAX)
            if secret_file == "-"  # noqa: S105 - "-" names standard input, not a secret
            else Path(secret_file).read_text()[:SECRET_FILE_BYTES_MAX]
        )
    except OSError as e:
        raise click.BadParameter(f"{secret_file}: {e.strerror}", param_hint="--secret-file") from e
    return raw.strip()


@click.group(cls=AdminGroup, short_help="Users and their rights on a broker with --auth.")
def acl() -> None:
    """Users and their rights on a broker with --auth (PUB/SUB on topics and groups)."""


@acl.group()
def user() -> None:
    """Create, list and delete the broker's users."""


@user.command("create")
@click.argument("access_key")
@click.option("--admin", "is_admin", is_flag=True, help="May do everything, admin calls too.")
@click.option("--update", is_flag=True, help="Set an existing user's secret and admin flag.")
@click.option(
    "--secret-file",
    default=None,
    metavar="FILE",
    help="Read the secret key from FILE ('-': standard input) instead of asking for it.",
)
@admin_command
def user_create(
    client: admin.AdminClient,
    as_json: bool,
    access_key: str,
    is_admin: bool,
    update: bool,
    secret_file: str | None,
) -> None:
    """Create user ACCESS_KEY (8..256 characters of secret key)."""
    request = apb.CreateUserRequest(
        access_key=access_key, secret_key=_secret(secret_file), admin=is_admin, update=update
    )
    response = client.call(client.acl_stub.CreateUser, request, apb.CreateUserResponse)
    verb = "created" if response.created else "updated"
    echo_answer(as_json, {"access_key": access_key, verb: True}, f"user {access_key} {verb}")


@user.command("delete")
@click.argument("access_key")
@admin_command
def user_delete(client: admin.AdminClient, as_json: bool, access_key: str) -> None:
    """Delete user ACCESS_KEY and its rules."""
    request = apb.DeleteUserRequest(access_key=access_key)
    client.call(client.acl_stub.DeleteUser, request, apb.DeleteUserResponse)
    echo_answer(as_json, {"access_key": access_key, "deleted": True}, f"user {access_key} deleted")


@user.command("list")
@admin_command
def user_list(client: admin.AdminClient, as_json: bool) -> None:
    """The users (never their secrets)."""
    response = client.call(client.acl_stub.ListUsers, apb.ListUsersRequest(), apb.ListUsersResponse)
    users = [
        {"access_key": u.access_key, "admin": u.admin, "rules": u.rule_count}
        for u in response.users
    ]
    lines = [
        f"{u.access_key}{'  (admin)' if u.admin else ''}  {plural(u.rule_count, 'rule')}"
        for u in response.users
    ]
    echo_answer(as_json, {"users": users}, "\n".join(lines) or "no users")


def _rule_options(f: Any) -> Any:
    f = click.option(
        "--action",
        "actions",
        multiple=True,
        type=click.Choice(ACTIONS, case_sensitive=False),
        help="PUB, SUB or ALL; repeat for several (default: ALL).",
    )(f)
    f = click.argument("resources", nargs=-1, required=True)(f)
    return click.argument("access_key")(f)


@acl.command("grant", short_help="Allow (or deny) a user actions on resources.")
@_rule_options
@click.option("--deny", is_flag=True, help="A DENY rule (it beats an ALLOW as specific).")
@admin_command
def grant(
    client: admin.AdminClient,
    as_json: bool,
    access_key: str,
    resources: tuple[str, ...],
    actions: tuple[str, ...],
    deny: bool,
) -> None:
    """Let (or with --deny, forbid) ACCESS_KEY the actions on each RESOURCE: Topic:NAME,
    Group:NAME, Topic:PREFIX*, Group:PREFIX* or '*'. A namespaced name: NAMESPACE%NAME."""
    decision = apb.DECISION_DENY if deny else apb.DECISION_ALLOW
    for resource in resources:
        request = apb.GrantRequest(
            access_key=access_key,
            resource=resource,
            actions=list(actions or ("ALL",)),
            decision=decision,
        )
        client.call(client.acl_stub.Grant, request, apb.GrantResponse)
    word = "DENY" if deny else "ALLOW"
    text = f"{word} {'/'.join(actions or ('ALL',))} on {', '.join(resources)} for {access_key}"
    echo_answer(as_json, {"access_key": access_key, "resources": list(resources)}, text)


@acl.command("revoke", short_help="Remove a user's rules on resources.")
@_rule_options
@admin_command
def revoke(
    client: admin.AdminClient,
    as_json: bool,
    access_key: str,
    resources: tuple[str, ...],
    actions: tuple[str, ...],
) -> None:
    """Remove ACCESS_KEY's rules for the actions on exactly each RESOURCE."""
    changed = 0
    for resource in resources:
        request = apb.RevokeRequest(
            access_key=access_key, resource=resource, actions=list(actions or ("ALL",))
        )
        changed += client.call(client.acl_stub.Revoke, request, apb.RevokeResponse).rules_changed
    echo_answer(as_json, {"rules_changed": changed}, f"{plural(changed, 'rule')} changed")


@acl.command("list")
@click.argument("access_key", required=False, default="")
@admin_command
def list_rules(client: admin.AdminClient, as_json: bool, access_key: str) -> None:
    """The rules of ACCESS_KEY, or of every user."""
    request = apb.ListRulesRequest(access_key=access_key)
    response = client.call(client.acl_stub.ListRules, request, apb.ListRulesResponse)
    rules = [
        {
            "access_key": r.access_key,
            "resource": r.resource,
            "actions": list(r.actions),
            "decision": apb.Decision.Name(r.decision).removeprefix("DECISION_"),
        }
        for r in response.rules
    ]
    lines = [
        f"{r['access_key']}  {r['decision']:<5}  {'/'.join(r['actions']):<7}  {r['resource']}"
        for r in rules
    ]
    echo_answer(as_json, {"rules": rules}, "\n".join(lines) or "no rules")
