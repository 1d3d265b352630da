# rocketbox's image: the `rocketbox` command (broker, sidecar, reconcile, admin tools) on Python 3.11,
# with a Java runtime for the PySpark reconciliation. helm/rocketbox runs it. From the repository root:
#
#   docker build -t rocketbox:0.1.0 .
#
# The tag is pyproject.toml's version, which the chart's appVersion and image.tag equal (tests/helm
# hold the three equal). The base image is named once, here, for both stages.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The broker's store is compiled to C by mypyc (setup.py): a C compiler, in this stage only.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY broker/ broker/
COPY namesrv/ namesrv/
COPY sidecar/ sidecar/
COPY outbox/ outbox/
COPY reconcile/ reconcile/
COPY rocketbox/ rocketbox/
COPY rocketbox_api/ rocketbox_api/
# The wheel is built with mypy (the version pyproject.toml's dev extra pins) in a throw-away
# environment; a virtual environment gets the wheel and its dependencies (with the reconcile extra:
# the image runs `rocketbox reconcile` too), and the runtime stage takes exactly what `pip install`
# put there.
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir --disable-pip-version-check \
       "setuptools>=77" "mypy==2.4.1" \
    && ROCKETBOX_MYPYC=1 /opt/build/bin/pip wheel --no-cache-dir --disable-pip-version-check \
       --no-build-isolation --no-deps -w /wheels . \
    && python -m venv /opt/rocketbox \
    && for whl in /wheels/rocketbox-*.whl; do \
         /opt/rocketbox/bin/pip install --no-cache-dir --disable-pip-version-check "${whl}[reconcile]"; \
       done

FROM ${PYTHON_IMAGE}
# PySpark needs Java. The slim image has no man page directories, which the JRE's post-install
# script links into.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
# A fixed non-root user: the chart's securityContext (runAsUser, runAsGroup, fsGroup) names it.
RUN groupadd --system --gid 10001 rocketbox \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rocketbox --create-home \
       --shell /usr/sbin/nologin rocketbox
COPY --from=build /opt/rocketbox /opt/rocketbox
ENV PATH=/opt/rocketbox/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SPARK_LOCAL_IP=127.0.0.1
USER 10001:10001
WORKDIR /var/lib/rocketbox
# The broker's gRPC port and the sidecar's (rocketbox broker / rocketbox sidecar defaults).
EXPOSE 8081 8980
ENTRYPOINT ["rocketbox"]
CMD ["--help"]
