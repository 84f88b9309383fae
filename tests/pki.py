"""Certificates generated in the tests: a CA and leaves signed by it.

Used by the mutual-TLS tests and by the real control plane (API server,
webhooks, Crossplane's function client and the function's server).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Fixed validity window: certificates are valid from 2026 for ten years.
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LOOPBACK_SANS = ("localhost", "127.0.0.1")


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


class CA:
    """A certificate authority whose leaves serve and authenticate on loopback."""

    def __init__(self, name: str, *, rsa_key: bool = False) -> None:
        self.name = name
        # Crossplane's package manager signs functions' certificates with its
        # root CA's key read as PKCS #1 (internal/initializer/tls.go): RSA only.
        self.key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if rsa_key
            else ec.generate_private_key(ec.SECP256R1())
        )
        self.cert = self._build(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), self.key.public_key(), ca=True
        )

    @property
    def pem(self) -> bytes:
        return pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        """The CA's own key: PKCS #1 for RSA (as Crossplane reads it), PKCS #8 otherwise."""
        if isinstance(self.key, rsa.RSAPrivateKey):
            return self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        return pem_key(self.key)

    def _build(
        self,
        subject: x509.Name,
        public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
        *,
        ca: bool,
        sans: tuple[str, ...] = (),
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW)
            .not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(_san(sans or LOOPBACK_SANS), critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        else:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        return builder.sign(self.key, hashes.SHA256())

    def leaf(
        self, common_name: str, *, organization: str | None = None, sans: tuple[str, ...] = ()
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a leaf for serving and client auth."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        return pem(self._build(x509.Name(attrs), key.public_key(), ca=False, sans=sans)), pem_key(key)

    def write_leaf(self, folder: Path, common_name: str, **kwargs: object) -> tuple[Path, Path]:
        """tls.crt, tls.key (and ca.crt) in folder, as Crossplane and most controllers read them."""
        cert, key = self.leaf(common_name, **kwargs)  # type: ignore[arg-type]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tls.crt").write_bytes(cert)
        (folder / "tls.key").write_bytes(key)
        (folder / "ca.crt").write_bytes(self.pem)
        return folder / "tls.crt", folder / "tls.key"
