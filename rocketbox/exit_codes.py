"""The exit codes the client-side commands share (`send`, `consume`, the broker's admin commands):
one meaning per number, so that a script can tell "fix the command" from "try again later" from
"wrong kind of server". The outbox commands add 4 and 5 of their own (outbox_session.py)."""

from __future__ import annotations

# The broker (or sidecar) answered that the operation failed, or a message was refused.
FAILED_EXIT_CODE = 1
# A bad option or argument (click's own usage errors exit 2 too).
USAGE_EXIT_CODE = 2
# The endpoint could not be reached, or did not answer in time: nothing was done.
UNREACHABLE_EXIT_CODE = 3
# The endpoint answered but does not serve the rocketbox service the command needs (an Apache
# RocketMQ proxy or NameServer in place of rocketbox's own): asking again will not help.
NOT_SERVED_EXIT_CODE = 6
