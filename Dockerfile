# kafkalite broker image.
#
#   python -m pip wheel --wheel-dir build/wheelhouse .      # on the host: the project and its dependencies
#   docker build -t kafkalite .                              # installs from build/wheelhouse only: no network
#
# BASE_IMAGE is any Debian-like image with python3 (>= 3.11, the same minor version as the
# Python that built the wheelhouse) and its venv module; tests/compose passes one built with
# debootstrap. The broker reads /etc/kafkalite/server.properties, then KAFKALITE_CFG_<KEY>
# environment variables (KAFKALITE_CFG_BROKER_ID=1 is broker.id=1), then any
# `--override key=value` given as command arguments. SIGTERM (docker stop) is a controlled
# shutdown: the broker moves its leaderships away before it exits.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG WHEELHOUSE=build/wheelhouse
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/kafkalite/bin:$PATH

COPY ${WHEELHOUSE} /tmp/wheelhouse
RUN python3 -m venv /opt/kafkalite \
 && /opt/kafkalite/bin/pip install --no-index --find-links /tmp/wheelhouse --no-cache-dir kafkalite \
 && rm -rf /tmp/wheelhouse \
 && (getent group kafkalite >/dev/null || groupadd --system --gid 10001 kafkalite) \
 && useradd --system --uid 10001 --gid kafkalite --home-dir /var/lib/kafkalite --no-create-home --shell /usr/sbin/nologin kafkalite \
 && mkdir -p /var/lib/kafkalite/data \
 && chown -R kafkalite:kafkalite /var/lib/kafkalite

COPY docker/server.properties /etc/kafkalite/server.properties
COPY docker/healthcheck.py /usr/local/lib/kafkalite/healthcheck.py

USER kafkalite
WORKDIR /var/lib/kafkalite
VOLUME ["/var/lib/kafkalite/data"]
# 19092: client listener for the container network; 9092: client listener advertised to
# the host; 9192: inter-broker RPC; 9292: admin HTTP (/healthz, /metrics, status page /).
EXPOSE 9092 19092 9192 9292
HEALTHCHECK --interval=5s --timeout=4s --start-period=60s --retries=6 \
    CMD ["python3", "/usr/local/lib/kafkalite/healthcheck.py"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["kafkalite", "broker", "--config", "/etc/kafkalite/server.properties"]
CMD []
