"""The users and their rules: a subset of RocketMQ 5's ACL 2.0.

A rule is ``(resource pattern, actions, decision)`` held by one user:

- a resource pattern is ``Topic:NAME``, ``Group:NAME``, a prefix ``Topic:PREFIX*`` or
  ``Group:PREFIX*``, or ``*`` (every topic and group); a namespaced name is written as it is
  stored, ``<namespace>%<name>`` (``Topic:shop%Orders``, or ``Topic:shop%*`` for a namespace);
- actions are PUB (send to a topic) and SUB (consume a topic, as a group); ALL is both;
- the decision is ALLOW or DENY.

For a request, the user's rules that match the resource and action are ranked by how specific
their pattern is (an exact name, then the longest prefix, then ``*``) and the most specific one
decides; DENY wins a tie. No matching rule: denied, as RocketMQ decides by default. An admin
user may do everything, including the admin service's calls, which others may not.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.auth.errors import AclInputError
from rocketbox_api.names import GROUP_LENGTH_MAX, NAME_PATTERN, TOPIC_LENGTH_MAX

ACCESS_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
SECRET_KEY_LENGTH_MIN = 8
SECRET_KEY_LENGTH_MAX = 256
USERS_MAX = 10_000
RULES_PER_USER_MAX = 1_000
ANY_RESOURCE = "*"


class Action(enum.Enum):
    PUB = "PUB"
    SUB = "SUB"


class Decision(enum.Enum):
    ALLOW = "ALLOW"
    DENY = "DENY"


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"


def parse_actions(names: Iterable[str]) -> frozenset[Action]:
    actions: set[Action] = set()
    for name in names:
        upper = name.strip().upper()
        if upper == "ALL":
            actions.update(Action)
        elif upper in Action.__members__:
            actions.add(Action[upper])
        else:
            raise AclInputError(f"action {name!r}: one of PUB, SUB, ALL")
    if not actions:
        raise AclInputError("actions: at least one of PUB, SUB, ALL")
    return frozenset(actions)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``type`` None: every resource (``*``)."""

    type: ResourceType | None
    name: str = ""
    prefix: bool = False

    @classmethod
    def parse(cls, text: str) -> ResourcePattern:
        text = text.strip()
        if text == ANY_RESOURCE:
            return cls(None)
        kind, sep, name = text.partition(":")
        types = {t.value.lower(): t for t in ResourceType}
        if not sep or kind.lower() not in types:
            raise AclInputError(
                f"resource {text!r}: Topic:NAME, Group:NAME, Topic:PREFIX*, Group:PREFIX* or *"
            )
        resource_type = types[kind.lower()]
        prefix = name.endswith("*")
        bare = name[:-1] if prefix else name
        length_max = TOPIC_LENGTH_MAX if resource_type is ResourceType.TOPIC else GROUP_LENGTH_MAX
        if len(bare) > length_max or (bare and NAME_PATTERN.fullmatch(bare) is None):
            raise AclInputError(
                f"resource {text!r}: a name of at most {length_max} characters of "
                "a-zA-Z0-9_-% (namespaced: NAMESPACE%NAME), optionally ending in *"
            )
        if not bare and not prefix:
            raise AclInputError(f"resource {text!r}: the name is empty")
        return cls(resource_type, bare, prefix)

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        if self.type is None:
            return True
        if self.type is not resource_type:
            return False
        return name.startswith(self.name) if self.prefix else name == self.name

    @property
    def specificity(self) -> int:
        """Higher is more specific: an exact name above any prefix, a longer prefix above a
        shorter one, ``*`` lowest."""
        if self.type is None:
            return 0
        return 1 + len(self.name) + (0 if self.prefix else TOPIC_LENGTH_MAX + 1)

    def __str__(self) -> str:
        if self.type is None:
            return ANY_RESOURCE
        return f"{self.type.value}:{self.name}{'*' if self.prefix else ''}"


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: ResourcePattern
    actions: frozenset[Action]
    decision: Decision


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: bytes = field(repr=False)
    admin: bool = False


def validate_user(access_key: str, secret_key: str) -> None:
    if ACCESS_KEY_PATTERN.fullmatch(access_key) is None:
        raise AclInputError(f"access key {access_key[:64]!r}: 1..64 characters of A-Za-z0-9_.@-")
    if not SECRET_KEY_LENGTH_MIN <= len(secret_key) <= SECRET_KEY_LENGTH_MAX:
        # The length only: a secret is never quoted.
        raise AclInputError(
            f"secret key of {access_key!r}: {SECRET_KEY_LENGTH_MIN}..{SECRET_KEY_LENGTH_MAX} "
            f"characters (it has {len(secret_key)})"
        )


class Acl:
    """The table; read on every authorised call, changed by the admin service."""

    def __init__(
        self,
        users: Mapping[str, User] | None = None,
        rules: Mapping[str, list[Rule]] | None = None,
    ) -> None:
        self.users: dict[str, User] = dict(users or {})
        self.rules: dict[str, list[Rule]] = {k: list(v) for k, v in (rules or {}).items()}

    def allows(self, user: User, resource_type: ResourceType, name: str, action: Action) -> bool:
        if user.admin:
            return True
        best: Rule | None = None
        for rule in self.rules.get(user.access_key, ()):
            if action not in rule.actions or not rule.pattern.matches(resource_type, name):
                continue
            # The most specific rule decides; of two as specific, DENY.
            if (
                best is None
                or rule.pattern.specificity > best.pattern.specificity
                or (
                    rule.pattern.specificity == best.pattern.specificity
                    and rule.decision is Decision.DENY
                )
            ):
                best = rule
        return best is not None and best.decision is Decision.ALLOW

    def allows_any(
        self, user: User, resource_type: ResourceType, name: str, actions: Iterable[Action]
    ) -> bool:
        """Whether any one of ``actions`` is allowed (QueryRoute: PUB or SUB)."""
        return any(self.allows(user, resource_type, name, a) for a in actions)

    def put_user(self, user: User) -> None:
        if user.access_key not in self.users and len(self.users) >= USERS_MAX:
            raise AclInputError(f"users: at most USERS_MAX={USERS_MAX}")
        self.users[user.access_key] = user

    def delete_user(self, access_key: str) -> bool:
        self.rules.pop(access_key, None)
        return self.users.pop(access_key, None) is not None

    def grant(
        self,
        access_key: str,
        pattern: ResourcePattern,
        actions: frozenset[Action],
        decision: Decision,
    ) -> None:
        """Sets the user's rule for ``pattern`` and each of ``actions`` to ``decision``; the
        pattern's other actions keep theirs."""
        if access_key not in self.users:
            raise AclInputError(f"user {access_key!r} does not exist")
        self.revoke(access_key, pattern, actions)
        rules = self.rules.setdefault(access_key, [])
        if len(rules) >= RULES_PER_USER_MAX:
            raise AclInputError(
                f"rules of {access_key!r}: at most RULES_PER_USER_MAX=" + str(RULES_PER_USER_MAX)
            )
        rules.append(Rule(pattern, actions, decision))

    def revoke(self, access_key: str, pattern: ResourcePattern, actions: frozenset[Action]) -> int:
        """Removes ``actions`` from the user's rules on exactly ``pattern``; how many rules
        changed."""
        changed = 0
        kept: list[Rule] = []
        for rule in self.rules.get(access_key, ()):
            if rule.pattern != pattern or not rule.actions & actions:
                kept.append(rule)
                continue
            changed += 1
            if rest := rule.actions - actions:
                kept.append(Rule(rule.pattern, rest, rule.decision))
        if access_key in self.rules:
            self.rules[access_key] = kept
        return changed
