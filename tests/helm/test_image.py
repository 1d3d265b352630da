"""The image recipe the chart runs (Dockerfile, .dockerignore at the repository's root), read
without building it (no container engine here).

Proves: one pinned base image for both stages; the project installed with `pip install .` from
exactly the packages pyproject.toml names, all of which .dockerignore lets into the context; a
Java runtime for PySpark; a fixed numeric non-root user, the same the chart runs as; `rocketbox`
as the entrypoint; and one version throughout: pyproject.toml's, which is the chart's appVersion,
its image tag and the tag the build instructions give.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib

import yaml

from tests.helm.chart import CHART, REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    return [(w.upper(), rest.strip()) for w, _, rest in (s.partition(" ") for s in logical)]


def of(name: str) -> list[str]:
    return [args for instruction, args in instructions() if instruction == name]


def version() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def chart_values() -> dict[str, object]:
    values: dict[str, object] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def test_one_pinned_base_image_for_both_stages() -> None:
    (arg,) = [a for a in of("ARG") if a.startswith("PYTHON_IMAGE=")]
    base = arg.removeprefix("PYTHON_IMAGE=")
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    froms = of("FROM")
    assert len(froms) == 2
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms), froms


def test_the_project_is_installed_with_pip_from_its_own_packages() -> None:
    runs = " ".join(of("RUN"))
    # The wheel of the project with its store compiled (setup.py), then installed with its deps.
    assert re.search(
        r"ROCKETBOX_MYPYC=1 \S*pip wheel [^&]*--no-deps [^&]*-w /wheels \.(\s|$)", runs
    )
    # With the reconcile extra: the image runs `rocketbox reconcile` (the chart's CronJob).
    wheel_install = (
        r"for whl in /wheels/rocketbox-\*\.whl; do\s+\S*pip install "
        r'[^&]*"\$\{whl\}\[reconcile\]"'
    )
    assert re.search(wheel_install, runs), runs
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (mypy_pin,) = [d for d in project["optional-dependencies"]["dev"] if d.startswith("mypy==")]
    assert f'"{mypy_pin}"' in runs, "the image compiles with the mypy the project pins"
    assert "gcc" in runs
    assert "openjdk-17-jre-headless" in runs
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    top_level = {p.rstrip("*") for p in packages["packages"]["find"]["include"]}
    copied = {
        source.rstrip("/")
        for c in of("COPY")
        if not c.startswith("--from")
        for source in c.split()[:-1]
    }
    assert copied >= top_level | {"pyproject.toml", "setup.py"}
    for source in copied:
        assert (REPO / source).exists(), source


def test_dockerignore_lets_in_what_is_copied_and_keeps_local_state_out() -> None:
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for rule in rules:
            pattern = rule.removeprefix("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern):
                keep = rule.startswith("!")
        return keep

    for c in of("COPY"):
        if not c.startswith("--from"):
            for source in c.split()[:-1]:
                assert included(source.rstrip("/")), source
    for outside in (".venv", "tests", "data", "build", "node_modules", ".git"):
        assert not included(outside), outside


def test_a_fixed_non_root_user_the_chart_runs_as() -> None:
    user = of("USER")[-1]
    assert re.fullmatch(r"\d+:\d+", user), (
        f"USER {user}: numeric UID:GID, so runAsNonRoot can check it"
    )
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0
    assert gid != 0
    runs = " ".join(of("RUN"))
    assert f"--uid {uid}" in runs
    assert f"--gid {gid}" in runs
    security = chart_values()["securityContext"]
    assert security == {"runAsUser": uid, "runAsGroup": gid, "fsGroup": gid}


def test_rocketbox_is_the_entrypoint() -> None:
    (entrypoint,) = of("ENTRYPOINT")
    assert json.loads(entrypoint) == ["rocketbox"]


def test_one_version_everywhere() -> None:
    v = version()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == v
    image = chart_values()["image"]
    assert isinstance(image, dict)
    assert image["tag"] == v
    # The build instructions in the Dockerfile and docs/kubernetes.md tag the image the chart pulls.
    for path in (DOCKERFILE, REPO / "docs" / "kubernetes.md"):
        tags = re.findall(r"docker build -t rocketbox:(\S+) \.", path.read_text())
        assert tags, f"{path.name} gives no `docker build -t rocketbox:<version> .`"
        assert set(tags) == {v}, path.name
