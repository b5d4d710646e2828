"""A throwaway certificate authority and one leaf certificate for the GCS test proxy (tests/gcs_proxy.py): TLS
clients (TensorFlow's libcurl through CURL_CA_BUNDLE, requests through REQUESTS_CA_BUNDLE) trust the CA file, and
the proxy answers CONNECT for Google's storage names with the leaf. Nothing here is kept after the test run."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TestCertificates:
    ca_file: Path  # the CA certificate alone (PEM): what clients trust
    leaf_file: Path  # the leaf certificate then the CA's (PEM chain): what the proxy presents
    key_file: Path  # the leaf's private key (PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_test_certificates(directory: Path, hosts: Sequence[str]) -> TestCertificates:
    """A CA valid for a day and a leaf for `hosts` signed by it, written into `directory`."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("estimator_mnist test CA")).issuer_name(
        _name("estimator_mnist test CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    certificates = TestCertificates(directory / "test-ca.pem", directory / "proxy-leaf.pem",
                                    directory / "proxy-leaf.key")
    certificates.ca_file.write_bytes(_pem(ca))
    certificates.leaf_file.write_bytes(_pem(leaf) + _pem(ca))
    certificates.key_file.write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return certificates
