"""The local cluster's certificates and kubeconfigs: one CA, a serving certificate for the API server
and the kubelet, a client certificate per component (its user and group are who RBAC sees), and the
service accounts' signing key. Made once, by `peerlab cluster up`, into the state directory.

    ca.crt/key                 the cluster's CA (10 years)
    apiserver-serving.crt      serves https://127.0.0.1:6443, 10.96.0.1 and kubernetes.default...
    kubelet-serving.crt        serves the kubelet's port 10250 (exec, logs, the API server's pod proxy)
    <user>-client.crt, <user>.key, <user>.kubeconfig   admin (system:masters), kube-controller-manager, kube-scheduler,
                               kubelet (system:node:<name> in system:nodes), kube-proxy, coredns,
                               apiserver-kubelet (the API server's client to the kubelet)
    sa.key/sa.pub              signs and checks service account tokens
"""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=3650)

# user -> (common name, organisation): the identity the API server's authoriser sees
USERS = {
    "admin": ("peerlab-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kube-proxy": ("system:kube-proxy", None),
    "coredns": ("peerlab-coredns", None),
    "apiserver-kubelet": ("kube-apiserver-kubelet-client", "system:masters"),
}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _certificate(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False,
                 usages: list | None = None, sans: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + VALID)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages or []), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    """A kubeconfig with one cluster, one user (a client certificate) and one context, `peerlab`."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "peerlab",
        "clusters": [{"name": "peerlab", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "peerlab", "context": {"cluster": "peerlab", "user": user}}],
    }, sort_keys=False))
    path.chmod(0o600)


def make(pki: Path, node_name: str, node_ip: str, service_ip: str, server: str) -> None:
    """Every certificate and kubeconfig of the cluster into `pki`, unless its CA is there already
    (a cluster keeps its identity across `down` and `up`; `down --purge` forgets it)."""
    if (pki / "ca.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("peerlab-cluster-ca")
    ca_cert = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    _write_key(ca_key, pki / "ca.key")
    _write_cert(ca_cert, pki / "ca.crt")

    ips = [ipaddress.ip_address(a) for a in ("127.0.0.1", node_ip, service_ip)]
    dns = ["localhost", node_name, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    servers = {"apiserver": ("kube-apiserver", dns), "kubelet": (node_name, ["localhost", node_name])}
    for name, (cn, names) in servers.items():
        key = _key()
        _write_key(key, pki / f"{name}-serving.key")
        _write_cert(_certificate(_name(cn), key, ca_name, ca_key, usages=[ExtendedKeyUsageOID.SERVER_AUTH],
                                 sans=[x509.DNSName(n) for n in names] + [x509.IPAddress(i) for i in ips]),
                    pki / f"{name}-serving.crt")

    users = {**USERS, "kubelet": (f"system:node:{node_name}", "system:nodes")}
    for user, (cn, org) in users.items():
        key = _key()
        _write_key(key, pki / f"{user}.key")
        _write_cert(_certificate(_name(cn, org), key, ca_name, ca_key, usages=[ExtendedKeyUsageOID.CLIENT_AUTH]),
                    pki / f"{user}-client.crt")
        kubeconfig(pki / f"{user}.kubeconfig", server, pki / "ca.crt", pki / f"{user}-client.crt",
                   pki / f"{user}.key", user)

    sa = _key()
    _write_key(sa, pki / "sa.key")
    (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo))
