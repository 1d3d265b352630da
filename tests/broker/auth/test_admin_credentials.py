"""The bootstrap admin's credentials, as a real ``rocketbox broker --auth`` process reads them
(--auth-admin-file, or ROCKETBOX_AUTH_ADMIN_ACCESS_KEY / _SECRET_KEY), and the one parser of
credentials files that the broker, the sidecar's --broker-credentials-file and the CLI share
(rocketbox_api/credentials.py).

Proves: an admin whose secret key is too short or too long, or whose access key has a space, stops
the start with one line on stderr naming where it came from, the field and the limit: exit 2,
no traceback, no secret shown, nothing created under the data directory; a credentials file
with a second ``secret_key=`` or ``access_key=`` line is refused naming that line and the first,
by the broker and by the sidecar alike, where it used to take the last one silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.auth.acl import SECRET_KEY_LENGTH_MAX, SECRET_KEY_LENGTH_MIN
from rocketbox.broker_security_options import ADMIN_ACCESS_KEY_ENV, ADMIN_SECRET_KEY_ENV
from rocketbox.cli import main
from rocketbox_api.credentials import CredentialsError, read_credentials_file
from tests.rocketbox_process import CLI_DEADLINE_S, REPO_ROOT

pytestmark = pytest.mark.slow

SECRET = "a-long-enough-secret"
OTHER_SECRET = "another-long-secret"
LIMIT = f"{SECRET_KEY_LENGTH_MIN}..{SECRET_KEY_LENGTH_MAX} characters"


def start_broker(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``rocketbox broker --auth ARGS`` as an operator starts it, expected to refuse; only the
    given ROCKETBOX_ variables are set."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
    return subprocess.run(
        [sys.executable, "-m", "rocketbox", "broker", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--auth", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, env={**environ, **(env or {})},
        timeout=CLI_DEADLINE_S, check=False,
    )  # fmt: skip


def refusal_line(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """The one line a refused start printed, once the refusal's other marks are checked."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert not (tmp_path / "data").exists(), "refused before the store was opened"
    return lines[0]


def admin_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "admin.credentials"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("access_key", "secret_key", "said"),
    [
        ("root", "short", f"secret key of 'root': {LIMIT} (it has 5)"),
        ("root", "s" * (SECRET_KEY_LENGTH_MAX + 1),
         f"secret key of 'root': {LIMIT} (it has {SECRET_KEY_LENGTH_MAX + 1})"),
        ("ro ot", SECRET, "access key 'ro ot': 1..64 characters of A-Za-z0-9_.@-"),
    ],
    ids=["short-secret", "long-secret", "access-key-with-a-space"],
)  # fmt: skip
def test_a_bad_admin_in_a_file_is_one_line_naming_the_file_the_field_and_the_limit(
    tmp_path: Path, access_key: str, secret_key: str, said: str
) -> None:
    path = admin_file(tmp_path, f"access_key={access_key}\nsecret_key={secret_key}\n")
    line = refusal_line(start_broker(tmp_path, "--auth-admin-file", str(path)), tmp_path)
    assert line == f"Error: --auth-admin-file {path}: {said}"
    assert secret_key not in line


@pytest.mark.parametrize(
    ("access_key", "secret_key", "variable", "said"),
    [
        ("root", "short", ADMIN_SECRET_KEY_ENV, f"secret key of 'root': {LIMIT} (it has 5)"),
        ("ro ot", SECRET, ADMIN_ACCESS_KEY_ENV,
         "access key 'ro ot': 1..64 characters of A-Za-z0-9_.@-"),
    ],
    ids=["short-secret", "access-key-with-a-space"],
)  # fmt: skip
def test_a_bad_admin_from_the_environment_names_the_variable(
    tmp_path: Path, access_key: str, secret_key: str, variable: str, said: str
) -> None:
    env = {ADMIN_ACCESS_KEY_ENV: access_key, ADMIN_SECRET_KEY_ENV: secret_key}
    line = refusal_line(start_broker(tmp_path, env=env), tmp_path)
    assert line == f"Error: {variable}: {said}"


@pytest.mark.parametrize("key", ["secret_key", "access_key"])
def test_the_broker_refuses_a_file_with_a_second_line_of_a_key(tmp_path: Path, key: str) -> None:
    lines = {"access_key": ["access_key=root", "access_key=admin"],
             "secret_key": [f"secret_key={SECRET}", f"secret_key={OTHER_SECRET}"]}  # fmt: skip
    other = "secret_key" if key == "access_key" else "access_key"
    # The other key first, then the twice-given one around a comment and a blank line.
    text = f"{lines[other][0]}\n{lines[key][0]}\n# rotated\n\n{lines[key][1]}\n"
    path = admin_file(tmp_path, text)
    line = refusal_line(start_broker(tmp_path, "--auth-admin-file", str(path)), tmp_path)
    assert line == (
        f"Error: --auth-admin-file: credentials file {path}, line 5: a second {key}= "
        "(the first is on line 2); one of each"
    )
    assert SECRET not in line
    assert OTHER_SECRET not in line


def test_the_sidecar_refuses_a_broker_credentials_file_with_a_second_line(
    tmp_path: Path,
) -> None:
    """The same parser behind --broker-credentials-file: the sidecar never signs with one of two
    secrets picked silently."""
    path = admin_file(tmp_path, f"access_key=app\nsecret_key={SECRET}\nsecret_key={OTHER_SECRET}\n")
    result = CliRunner().invoke(
        main,
        ["sidecar", "--broker", "127.0.0.1:1", "--outbox", f"rocksdb://{tmp_path / 'o'}",
         "--broker-credentials-file", str(path)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"credentials file {path}, line 3: a second secret_key=" in result.output
    assert SECRET not in result.output
    assert OTHER_SECRET not in result.output


def test_one_of_each_key_with_comments_and_blank_lines_is_read(tmp_path: Path) -> None:
    path = admin_file(tmp_path, f"# the admin\n\n  access_key = root \nsecret_key={SECRET}\n")
    credentials = read_credentials_file(path)
    assert (credentials.access_key, credentials.secret_key) == ("root", SECRET)
    twice = admin_file(tmp_path, "access_key=a\naccess_key=a\nsecret_key=x\n")
    first_said = r"line 2: a second access_key= \(the first is on line 1\)"
    with pytest.raises(CredentialsError, match=first_said):
        read_credentials_file(twice)
