"""What each install holds: ``make run`` installs the runtime set, the project with its
``reconcile`` extra and the client library, and none of the test tools; ``make test`` adds the dev
extra through a second stamp. An install without the reconcile extra gets a clear error from
``rocketbox reconcile`` naming the missing modules and the extra, not an ImportError.
"""

from __future__ import annotations

import re
import tomllib

import click
import pytest

from rocketbox import reconcile_cli
from tests.rocketbox_process import REPO_ROOT

DEV_TOOLS = ("pytest", "mypy", "ruff", "hypothesis", "import-linter", "pre-commit", "grpcio-tools")


def makefile_rule(target: str) -> str:
    """The rule of ``target``: its line and its recipe's lines."""
    text = (REPO_ROOT / "Makefile").read_text()
    found = re.search(rf"^{re.escape(target)}:.*\n(?:\t.*\n)*", text, re.MULTILINE)
    assert found is not None, f"the Makefile has no rule for {target}"
    return found[0]


def test_the_runtime_set_holds_no_test_tool() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=\[;]", d)[0].strip().lower() for d in project["dependencies"]]
    for tool in DEV_TOOLS:
        assert tool not in names, f"{tool} is a test tool, in the runtime dependencies"
    extras = project["optional-dependencies"]
    assert {"reconcile", "dev"} <= set(extras)
    assert any(d.startswith("pyspark") for d in extras["reconcile"])


def test_make_run_installs_the_runtime_set_and_make_test_the_dev_extra() -> None:
    assert makefile_rule("run").startswith("run: $(RUN_STAMP)\n")
    run_install = makefile_rule("$(RUN_STAMP)")
    assert "-e '.[reconcile]'" in run_install
    assert "dev" not in run_install
    assert "--quiet -e" not in run_install  # pip's progress is shown
    assert makefile_rule("$(DEV_STAMP)").startswith("$(DEV_STAMP): $(RUN_STAMP)\n")
    assert "-e '.[reconcile,dev]'" in makefile_rule("$(DEV_STAMP)")
    assert makefile_rule("check").startswith("check: $(DEV_STAMP)\n")
    assert makefile_rule("lint").startswith("lint: check\n")
    assert makefile_rule("test-fast").startswith("test-fast: $(DEV_STAMP)\n")
    test = makefile_rule("test")
    assert test.startswith("test: $(DEV_STAMP) ")
    assert " check " in test.splitlines()[1]  # the checks run first, beside the compiled store


def test_reconcile_without_its_extra_says_how_to_add_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module no install has stands for a library the reconcile extra brings and this one lacks.
    monkeypatch.setattr(reconcile_cli, "RECONCILE_EXTRA_MODULES", ("pyspark", "no_such_module"))
    with pytest.raises(click.ClickException) as raised:
        reconcile_cli._check_reconcile_extra()
    assert raised.value.message == (
        "rocketbox reconcile needs no_such_module (the reconcile extra): "
        "pip install 'rocketbox[reconcile]' (make run installs it)"
    )
