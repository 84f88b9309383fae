"""The function's server CLI: the SDK's standard flags and environment variables."""

from __future__ import annotations

import gc
import io
import sys
from typing import Any

import click
from crossplane.function import cli as sdkcli
from crossplane.function import logging

from function import fn


@click.command(epilog="Render without a cluster: python -m function render --help")
@sdkcli.standard_options
def cli(**kwargs: Any) -> None:
    """Serve function-gateway-readiness over gRPC for Crossplane.

    SIGTERM stops it gracefully: calls it has taken are answered (5 s grace).
    """
    send_mb = kwargs["max_send_message_size"] or kwargs["max_recv_message_size"]
    # Log lines reach a pipe (a container runtime, a CI log) as they happen.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    logging.configure(level=logging.Level.DEBUG if kwargs["debug"] else logging.Level.INFO)
    # One line an operator can check at start: where, how, with which limits.
    logging.get_logger().info(
        "serving function-gateway-readiness",
        address=kwargs["address"],
        tls="insecure (plaintext)" if kwargs["insecure"] else f"mTLS from {kwargs['tls_certs_dir']}",
        max_recv_mb=kwargs["max_recv_message_size"],
        max_send_mb=send_mb,
    )
    runner = fn.FunctionRunner(max_response_bytes=send_mb * 1024 * 1024, log_requests=kwargs["debug"])
    # Everything imported so far lives as long as the process: move it out of
    # the collector's generations, so a full collection triggered by a large
    # request scans only what requests allocate (it was part of the p99 tail).
    gc.freeze()
    sdkcli.run(runner, **kwargs)


if __name__ == "__main__":
    cli()
