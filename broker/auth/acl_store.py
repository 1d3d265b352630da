"""The ACL on disk: ``<data-dir>/config/acl.json``, replaced atomically on every change.

Secret keys are stored encrypted (Fernet: AES-128-CBC with HMAC-SHA256), never in clear and
never hashed: verifying an HMAC signature needs the secret itself. The encryption key is its own
file (``--auth-key-file``, by default ``config/acl.key`` beside the ACL, made with mode 0600 when
first needed); in production it comes from a Secret mounted apart from the data volume, so a copy
of the data alone holds no usable secret. A key that does not open the file stops the broker
with an error naming the key file, rather than starting with users it cannot verify.

Format (version 1)::

    {"version": 1,
     "users": [{"access_key": "app", "secret_key": "<Fernet token>", "admin": false}],
     "rules": {"app": [{"resource": "Topic:Orders", "actions": ["PUB"], "decision": "ALLOW"}]}}
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from broker.auth.acl import (
    Acl,
    Decision,
    ResourcePattern,
    Rule,
    User,
    parse_actions,
    validate_user,
)
from broker.auth.errors import AclInputError
from broker.state_file import read_json, write_json_atomic

ACL_FILE_NAME = "acl.json"
KEY_FILE_NAME = "acl.key"
FORMAT_VERSION = 1


class AclFileError(Exception):
    """The ACL or its key cannot be read; the message names the file. Not retriable."""


def load_key(path: Path) -> Fernet:
    """The encryption key at ``path``, made (mode 0600) when the file does not exist."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key())
    try:
        return Fernet(path.read_bytes().strip())
    except (OSError, ValueError) as e:
        raise AclFileError(f"ACL key file {path}: not a readable Fernet key ({e})") from None


class AclStore:
    def __init__(self, path: Path, key_file: Path) -> None:
        """``key_file`` is read (or made) when first needed: a broker that never has a user
        (authentication off, no ``rocketbox acl``) leaves no key behind."""
        self.path = path
        self._key_file = key_file
        self._loaded_key: Fernet | None = None
        self._write_lock = asyncio.Lock()
        self._listeners: list[Callable[[], object]] = []
        self.acl = self._read()

    def add_listener(self, listener: Callable[[], object]) -> None:
        """Call ``listener`` after every change of the table, before the change is written or
        answered: what was allowed before it is held to the new table at once (open Telemetry
        streams are: broker/grpc_service/stream_access.py)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    @property
    def _key(self) -> Fernet:
        if self._loaded_key is None:
            self._loaded_key = load_key(self._key_file)
        return self._loaded_key

    def _read(self) -> Acl:
        data = read_json(self.path)
        if data is None:
            return Acl()
        return self._parse(data)

    def _parse(self, data: dict[str, Any]) -> Acl:
        if data.get("version") != FORMAT_VERSION:
            raise AclFileError(f"{self.path}: version {data.get('version')!r}, expected 1")
        users: dict[str, User] = {}
        try:
            for entry in data["users"]:
                secret = self._key.decrypt(entry["secret_key"].encode())
                users[entry["access_key"]] = User(entry["access_key"], secret, entry["admin"])
            rules = {
                access_key: [_rule_of(r) for r in entries]
                for access_key, entries in data["rules"].items()
            }
        except InvalidToken:
            raise AclFileError(
                f"{self.path}: a secret key does not open with this key file "
                "(--auth-key-file): the broker would not verify its users"
            ) from None
        except (KeyError, TypeError, AclInputError) as e:
            raise AclFileError(f"{self.path}: malformed ({e!r})") from None
        return Acl(users, rules)

    def snapshot(self) -> dict[str, Any]:
        """The file's content for the current table (encrypting each secret afresh)."""
        return {
            "version": FORMAT_VERSION,
            "users": [
                {
                    "access_key": u.access_key,
                    "secret_key": self._key.encrypt(u.secret_key).decode(),
                    "admin": u.admin,
                }
                for u in self.acl.users.values()
            ],
            "rules": {
                access_key: [
                    {
                        "resource": str(r.pattern),
                        "actions": sorted(a.value for a in r.actions),
                        "decision": r.decision.value,
                    }
                    for r in rules
                ]
                for access_key, rules in self.acl.rules.items()
                if rules
            },
        }

    async def save(self) -> None:
        """Writes the table as it is now, after telling the listeners it changed (every change
        is saved); changes made while a write runs land in the next."""
        self._changed()
        async with self._write_lock:
            await asyncio.to_thread(write_json_atomic, self.path, self.snapshot())
            os.chmod(self.path, 0o600)

    def replace(self, snapshot: dict[str, Any]) -> bool:
        """Takes another store's ``snapshot`` (a slave its master's: they share the key), in
        place, and writes it when it differs; True if it did. AclFileError if it cannot be
        read with this store's key."""
        incoming = self._parse(snapshot)
        if incoming.users == self.acl.users and incoming.rules == self.acl.rules:
            return False
        # In place: the authenticator and the access layer hold these very dictionaries.
        self.acl.users.clear()
        self.acl.users.update(incoming.users)
        self.acl.rules.clear()
        self.acl.rules.update(incoming.rules)
        self._changed()
        write_json_atomic(self.path, self.snapshot())
        os.chmod(self.path, 0o600)
        return True

    def put_user(self, access_key: str, secret_key: str, admin: bool) -> None:
        validate_user(access_key, secret_key)
        self.acl.put_user(User(access_key, secret_key.encode(), admin))


def _rule_of(entry: dict[str, Any]) -> Rule:
    return Rule(
        ResourcePattern.parse(entry["resource"]),
        parse_actions(entry["actions"]),
        Decision(entry["decision"]),
    )
