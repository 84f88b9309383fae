# syntax=docker/dockerfile:1

# Build and runtime share one Python: Debian 12's python3 is 3.11, and so is
# distroless python3-debian12. The venv built here is copied as is, so the
# interpreter paths and ABI must match exactly.
FROM debian:12-slim AS build

RUN apt-get update \
 && apt-get install --no-install-recommends --yes python3-venv \
 && rm -rf /var/lib/apt/lists/*

# /venv mirrors the path the runtime image uses.
RUN python3 -m venv /venv && /venv/bin/pip install --no-cache-dir --upgrade pip

WORKDIR /fn
COPY pyproject.toml README.md ./
COPY function function
RUN /venv/bin/pip install --no-cache-dir .

FROM gcr.io/distroless/python3-debian12 AS runtime

COPY --from=build /venv /venv
# distroless' python3 is /usr/bin/python3; the venv's interpreter links to it.
ENV PATH=/venv/bin:$PATH

# Crossplane talks to functions on 9443 with mTLS; certificates are mounted
# into TLS_SERVER_CERTS_DIR by the function runtime.
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/venv/bin/python3", "-m", "function"]
