"""The function's server CLI: the SDK's standard flags and environment variables."""

from __future__ import annotations

from typing import Any

import click
from crossplane.function import cli as sdkcli

from function import fn


@click.command()
@sdkcli.standard_options
def cli(**kwargs: Any) -> None:
    """Serve function-gateway-readiness over gRPC for Crossplane."""
    send_mb = kwargs["max_send_message_size"] or kwargs["max_recv_message_size"]
    sdkcli.run(fn.FunctionRunner(max_response_bytes=send_mb * 1024 * 1024), **kwargs)


if __name__ == "__main__":
    cli()
