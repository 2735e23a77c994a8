# Beacon in a container, built from this source tree:
#
#   docker build -t beacon .                  (or: podman build -t beacon .)
#   docker run -d --name beacon -p 127.0.0.1:8080:8080 -v beacon-data:/data beacon \
#       --http tcp:8080:interface=0.0.0.0 --public-url https://beacon.example.org
#
# Arguments after the image name are twistd beacon's (README: "Configure");
# the data directory is the volume /data, the operator socket is in it:
#   docker exec beacon beacon review --data /data list
FROM python:3.11-slim

# Beacon and its dependencies, from the source tree (no editable install),
# then Twisted's plugin cache, written once here: the image's files are
# read-only to the user Beacon runs as.
WORKDIR /src
COPY setup.cfg pyproject.toml README.rst LICENSE ./
COPY beacon ./beacon
COPY twisted ./twisted
RUN pip install --no-cache-dir . \
    && python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))" \
    && rm -rf /src

# A user of its own, not root; its data directory is the volume.
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin beacon \
    && mkdir -m 0700 /data && chown beacon:beacon /data
USER beacon
WORKDIR /data
VOLUME /data
EXPOSE 8080

# twistd in the foreground, no pidfile; the log on standard output.
ENTRYPOINT ["twistd", "-n", "--pidfile=", "beacon", "--data", "/data"]
# Listen on every interface of the container (publish the port on the
# host's loopback, or behind a proxy), and give the URL agents use.
CMD ["--http", "tcp:8080:interface=0.0.0.0", "--public-url", "http://127.0.0.1:8080"]
