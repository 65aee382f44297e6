# undoproxy in a container: the proxy and the admin API/page on the addresses of
# /config/config.yaml (docker/config.yaml by default: 8080 and 8081 on every interface of the
# container); the journal, CA, admin token and credentials key on the /data volume.
#   docker build -t undoproxy .
#   docker run -p 127.0.0.1:8080:8080 -p 127.0.0.1:8081:8081 -v undoproxy-data:/data undoproxy
# Your own config: -v "$PWD/myconfig:/config:ro" (a folder with config.yaml and the rule files
# it includes). The admin token is printed at first start (`docker logs`) and kept on /data.
# docs/deploy.md says more, including how the tests build it (BASE, the CA secret).
#
# Needs BuildKit (the default builder since Docker 23). No `# syntax=` line: the builder's own
# Dockerfile frontend is used, so building needs no image besides BASE.
#   --build-arg BASE=IMAGE   any Debian-like image with python3 (>= 3.11) and python3-venv
#   --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt   when PyPI is reached through
#       a TLS-inspecting proxy: pip trusts that bundle during the build; it is not kept
ARG BASE=python:3.12-slim

# Only the dependency list of pyproject.toml: the install layer below is rebuilt when that
# list changes, not on every edit of pyproject.toml.
FROM ${BASE} AS requirements
COPY pyproject.toml /src/pyproject.toml
RUN python3 -c 'import tomllib; \
deps = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]; \
print("\n".join(deps))' > /requirements.txt

FROM ${BASE}
ENV PATH=/opt/undoproxy/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    UNDOPROXY_CONFIG=/config/config.yaml \
    UNDOPROXY_STATE_DIR=/data
# The dependencies (and setuptools, to install undoproxy itself offline below) in their own
# layer, before the source: editing undoproxy reuses it.
COPY --from=requirements /requirements.txt /tmp/requirements.txt
RUN --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/undoproxy \
    && pip install --no-cache-dir --disable-pip-version-check --quiet \
        -r /tmp/requirements.txt 'setuptools>=77' \
    && rm /tmp/requirements.txt \
    && useradd --create-home --uid 10001 --user-group undoproxy \
    && mkdir -p /data /config && chown undoproxy:undoproxy /data && chmod 0700 /data

COPY pyproject.toml README.md /src/
COPY undoproxy /src/undoproxy
RUN pip install --no-cache-dir --disable-pip-version-check --quiet \
        --no-deps --no-build-isolation /src \
    && rm -rf /src
COPY docker/config.yaml /config/config.yaml
COPY docker/healthcheck.py /usr/local/lib/undoproxy/healthcheck.py

USER undoproxy
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080 8081
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python3", "/usr/local/lib/undoproxy/healthcheck.py"]
ENTRYPOINT ["undoproxy"]
CMD ["run", "-c", "/config/config.yaml"]
