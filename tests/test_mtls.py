"""Mutual TLS with Crossplane's certificate layout: tls.crt, tls.key, ca.crt.

Certificates are generated here: a CA that signs the server's and a client's
certificates, and a second CA nobody trusts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from tests.pki import CA
from tests.support import EXAMPLES, GATEWAY_INPUT, load_yaml, make_request, served_function

XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]


class PKI:
    """Crossplane's root CA, and a second CA nobody here trusts."""

    def __init__(self) -> None:
        self.trusted = CA("crossplane-root-ca")
        self.other = CA("someone-else")

    @property
    def ca_pem(self) -> bytes:
        return self.trusted.pem

    def leaf(self, name: str, *, trusted: bool = True) -> tuple[bytes, bytes]:
        return (self.trusted if trusted else self.other).leaf(name)


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def address(pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    certs: Path = tmp_path_factory.mktemp("certs")
    pki.trusted.write_leaf(certs, "function-gateway-readiness")
    with served_function(env={"TLS_SERVER_CERTS_DIR": str(certs)}) as address:
        yield address


def call(address: str, root: bytes, client: tuple[bytes, bytes] | None) -> grpc.RpcError | None:
    creds = grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=client[1] if client else None,
        certificate_chain=client[0] if client else None,
    )
    with grpc.secure_channel(address, creds) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        try:
            rsp = stub.RunFunction(make_request(XR, GATEWAY_INPUT), timeout=10)
        except grpc.RpcError as e:
            return e
        assert len(rsp.desired.resources) == 6
        return None


def test_a_client_with_a_certificate_from_the_ca_is_served(pki: PKI, address: str) -> None:
    assert call(address, pki.ca_pem, pki.leaf("crossplane")) is None


def test_a_client_without_a_certificate_is_refused(pki: PKI, address: str) -> None:
    error = call(address, pki.ca_pem, None)
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_with_another_cas_certificate_is_refused(pki: PKI, address: str) -> None:
    error = call(address, pki.ca_pem, pki.leaf("intruder", trusted=False))
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE
