# undoproxy in a container: the proxy on 8080 and the admin API/page on 8081, reachable from
# the host; the journal, CA, admin token and credentials key on the /data volume.
#   docker build -t undoproxy .
#   docker run -p 8080:8080 -p 8081:8081 -v undoproxy-data:/data undoproxy
# Admin binds to 0.0.0.0 inside the container only; publish it on the host's loopback
# (-p 127.0.0.1:8081:8081) unless you mean to expose it. The token is printed at first start.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY undoproxy ./undoproxy
RUN pip install --no-cache-dir . && useradd --create-home --uid 10001 undoproxy \
    && mkdir -p /data && chown undoproxy /data
COPY docker/config.yaml /etc/undoproxy/config.yaml
USER undoproxy
VOLUME ["/data"]
EXPOSE 8080 8081
ENV UNDOPROXY_CONFIG=/etc/undoproxy/config.yaml UNDOPROXY_STATE_DIR=/data
ENTRYPOINT ["undoproxy"]
CMD ["run"]
