"""The ACL on disk (broker/auth/acl_store.py): users and rules survive a reopen; the file holds
no secret in clear and is readable by its owner alone; a key file that does not open the secrets
stops the start naming the key file; a malformed file names itself."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from broker.auth.acl import Action, Decision, ResourcePattern, ResourceType, parse_actions
from broker.auth.acl_store import AclFileError, AclStore, load_key

SECRET = "the-secret-key-of-app"


def test_users_and_rules_survive_a_reopen_and_secrets_are_encrypted(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acl.json", tmp_path / "acl.key")
    assert not (tmp_path / "acl.key").exists()  # made when first needed, not before
    store.put_user("app", SECRET, admin=False)
    store.acl.grant("app", ResourcePattern.parse("Topic:Orders"), parse_actions(["PUB"]),
                    Decision.ALLOW)  # fmt: skip
    asyncio.run(store.save())
    raw = (tmp_path / "acl.json").read_text()
    assert SECRET not in raw
    assert stat.S_IMODE((tmp_path / "acl.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "acl.key").stat().st_mode) == 0o600

    again = AclStore(tmp_path / "acl.json", tmp_path / "acl.key")
    app = again.acl.users["app"]
    assert app.secret_key == SECRET.encode()
    assert SECRET not in repr(app)
    assert again.acl.allows(app, ResourceType.TOPIC, "Orders", Action.PUB)
    assert not again.acl.allows(app, ResourceType.TOPIC, "Orders", Action.SUB)
    assert not again.acl.allows(app, ResourceType.TOPIC, "Other", Action.PUB)


def test_another_key_stops_the_start_naming_the_key_file(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acl.json", tmp_path / "acl.key")
    store.put_user("app", SECRET, admin=True)
    asyncio.run(store.save())
    with pytest.raises(AclFileError, match="--auth-key-file"):
        AclStore(tmp_path / "acl.json", tmp_path / "other.key")


def test_a_malformed_file_or_key_names_itself(tmp_path: Path) -> None:
    (tmp_path / "acl.json").write_text('{"version": 1, "users": [{"access_key": "x"}]}')
    with pytest.raises(AclFileError, match=r"acl\.json: malformed"):
        AclStore(tmp_path / "acl.json", tmp_path / "acl.key")
    (tmp_path / "bad.key").write_text("not a key")
    with pytest.raises(AclFileError, match=r"bad\.key"):
        load_key(tmp_path / "bad.key")
