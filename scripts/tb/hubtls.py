"""TLS for the mock CDN (`testbed up --hub-cdn-tls`): the real bridge answers over HTTPS only, so
every client's per-byte work there includes TLS (record decryption, 16 KiB records).

A self-signed certificate for the CDN's bridge address, made per testbed, and a trust bundle
(the host's system bundle plus that certificate) that every node sees at the system path,
/etc/ssl/certs/ca-certificates.crt: Python's ssl default paths, aria2c's GnuTLS and curl read
it there, as on a real node whose trust store holds the CDN's issuer. huggingface_hub's httpx
client reads certifi's bundle instead unless SSL_CERT_FILE names one (httpx 0.29.0
_config.create_ssl_context)."""
from __future__ import annotations

import ssl
from pathlib import Path

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CERT, KEY, TRUST = "cdn-cert.pem", "cdn-key.pem", "trust.pem"


def self_signed(address: str, cert: Path, key: Path) -> None:
    """A self-signed P-256 certificate for the IP ADDRESS (cryptography: paramiko's dependency)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = datetime.datetime.now(datetime.UTC)
    built = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), False)
             .sign(private, hashes.SHA256()))
    Path(cert).write_bytes(built.public_bytes(serialization.Encoding.PEM))
    Path(key).write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))


def make(hub_dir: Path, address: str) -> Path:
    """Certificate and key for ADDRESS in HUB_DIR, and the nodes' trust bundle; returns its path."""
    hub_dir = Path(hub_dir)
    self_signed(address, hub_dir / CERT, hub_dir / KEY)
    system = SYSTEM_BUNDLE.read_text() if SYSTEM_BUNDLE.exists() else ""
    (hub_dir / TRUST).write_text(system.rstrip("\n") + "\n" + (hub_dir / CERT).read_text())
    return hub_dir / TRUST


def trust_bundle(tb_dir: Path) -> Path | None:
    """The nodes' trust bundle when this testbed's CDN speaks TLS, else None."""
    path = Path(tb_dir) / "hub" / TRUST
    return path if path.exists() else None


def server_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def wrap(server, cert: str, key: str) -> None:
    """Serve TLS on SERVER's socket; each handshake is done in its connection's own thread
    (handshake_in_thread), never in the accepting loop, where one slow client would hold all."""
    server.socket = server_context(cert, key).wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False)


def handshake_in_thread(sock, timeout: float) -> None:
    if isinstance(sock, ssl.SSLSocket):
        sock.settimeout(timeout)
        sock.do_handshake()
