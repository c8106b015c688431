"""A self-signed certificate for a test server on a loopback address, for clients that speak only
https (simple-salesforce builds every URL as https://): the server gets an `ssl.SSLContext`, the
client trusts `cert` (e.g. `REQUESTS_CA_BUNDLE` for requests). Made with `cryptography` (in the
venv through jwcrypto); valid for a day; the key stays in the test's folder."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class SelfSigned:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def self_signed(folder: Path, address: str = "127.0.0.1") -> SelfSigned:
    """A certificate for the IP `address` (its subjectAltName), signed by its own key."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"AuthBridge test server {address}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    files = SelfSigned(folder / "server.crt", folder / "server.key")
    files.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    return files
