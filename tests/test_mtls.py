"""Mutual TLS with Crossplane's certificate layout: tls.crt, tls.key, ca.crt.

Certificates are generated here: a CA that signs the server's and a client's
certificates, and a second CA nobody trusts.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import EXAMPLES, GATEWAY_INPUT, load_yaml, make_request, served_function

XR = load_yaml(EXAMPLES / "inference-gateway" / "xr.yaml")[0]
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
) -> x509.Certificate:
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW)
        .not_valid_after(NOW + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class PKI:
    def __init__(self) -> None:
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = _cert("crossplane-root-ca", self.ca_key, None, ca=True)
        self.other_key = ec.generate_private_key(ec.SECP256R1())
        self.other_ca = _cert("someone-else", self.other_key, None, ca=True)

    def leaf(self, name: str, *, trusted: bool = True) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        issuer = ("crossplane-root-ca", self.ca_key) if trusted else ("someone-else", self.other_key)
        return _pem(_cert(name, key, issuer, ca=False)), _pem_key(key)


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def address(pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    certs: Path = tmp_path_factory.mktemp("certs")
    crt, key = pki.leaf("function-gateway-readiness")
    (certs / "tls.crt").write_bytes(crt)
    (certs / "tls.key").write_bytes(key)
    (certs / "ca.crt").write_bytes(_pem(pki.ca))
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
        assert len(rsp.desired.resources) == 5
        return None


def test_a_client_with_a_certificate_from_the_ca_is_served(pki: PKI, address: str) -> None:
    assert call(address, _pem(pki.ca), pki.leaf("crossplane")) is None


def test_a_client_without_a_certificate_is_refused(pki: PKI, address: str) -> None:
    error = call(address, _pem(pki.ca), None)
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_with_another_cas_certificate_is_refused(pki: PKI, address: str) -> None:
    error = call(address, _pem(pki.ca), pki.leaf("intruder", trusted=False))
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE
