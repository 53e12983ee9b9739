"""Certificates and keys for a devcluster, made fresh for every cluster.

Why real x509 instead of a token file: the components authenticate the way
they do in production (client certificates whose CN/O become user and groups),
so RBAC in tests sees ``system:kube-controller-manager`` and
``system:kube-scheduler`` exactly as on a kubeadm cluster, and the admin
kubeconfig verifies the apiserver's serving certificate instead of skipping
TLS verification. Keys are ECDSA P-256: generating them takes milliseconds,
which keeps ``devcluster up`` quick. The service-account signing key is RSA
because the apiserver's ``--service-account-key-file`` wants a PEM public key
and RS256 is the signing algorithm every client library supports.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)

# Client identities: file stem -> (common name, organisation or None).
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("pitcrew-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok", "system:masters"),
}
KUBELET_CLIENT = "apiserver-kubelet-client"
"""The apiserver's identity towards kubelets (logs, exec), as kubeadm's: a real node's
kubelet authenticates it with the devcluster CA and asks the apiserver what it may do."""


@dataclass(frozen=True)
class Pki:
    """Paths of every credential a devcluster needs, all under one folder."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _name(common_name: str, organisation: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organisation:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(attributes)


def _builder(
    *, subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def create(directory: Path) -> Pki:
    """Write a CA, a serving certificate for 127.0.0.1, client certificates and
    the service-account key pair into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("pitcrew-devcluster-ca")
    ca_cert = (
        _builder(subject=ca_name, issuer=ca_name, public_key=ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.ca_key, _pem_key(ca_key), private=True)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = (
        _builder(
            subject=_name("kube-apiserver"), issuer=ca_name, public_key=serving_key.public_key()
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.serving_cert, serving.public_bytes(serialization.Encoding.PEM))
    _write(pki.serving_key, _pem_key(serving_key), private=True)

    for stem, (common_name, organisation) in CLIENTS.items():
        issue_client(pki, stem, common_name=common_name, organisation=organisation)
    issue_client(
        pki,
        KUBELET_CLIENT,
        common_name="kube-apiserver-kubelet-client",
        organisation="system:masters",
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki.sa_key, _pem_key(sa_key), private=True)
    _write(
        pki.sa_pub,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return pki


def issue_client(pki: Pki, stem: str, *, common_name: str, organisation: str | None) -> None:
    """A client certificate from the devcluster CA: the apiserver takes its CN as the
    user and its O as the group, as a kubeadm cluster's kubelets and admins get."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_name = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()).subject
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (
        _builder(
            subject=_name(common_name, organisation),
            issuer=ca_name,
            public_key=client_key.public_key(),
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.client_cert(stem), client.public_bytes(serialization.Encoding.PEM))
    _write(pki.client_key(stem), _pem_key(client_key), private=True)
