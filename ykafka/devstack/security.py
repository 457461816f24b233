"""A secured Apache Kafka broker's pieces: a certificate authority and broker certificates, the listener
and authorizer properties, and the super user's SCRAM credential written at storage format time.

The stack's Kafka launcher adds these to its ``server.properties`` and ``kafka-storage format`` call when a
cluster is secured (docs/metaserver.md, "Broker-side enforcement"). Certificates come from the
``cryptography`` package (the MetaServer's credential encryption uses it too), so no ``keytool`` or
``openssl`` is needed: Kafka reads PEM key stores directly (``ssl.keystore.type=PEM``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: the MetaServer's principal on the local stack's secured clusters (the one super user apps' grants never carry)
ADMIN_USER = "ykafka-admin"
#: the nodes' own principal on the inter-broker (client) listener: SCRAM, a super user, never handed out
BROKER_USER = "ykafka-broker"
#: the nodes' principal on the KRaft controller listener: SASL/PLAIN (KRaft cannot serve SCRAM there: the
#: credentials live in the metadata the controller itself serves), the only user that listener accepts
CONTROLLER_USER = "ykafka-controller"
#: the controller listener's one mechanism
CONTROLLER_MECHANISM = "PLAIN"
#: ``connections.max.reauth.ms`` of the local stack: a connection authenticated with a credential deleted since
#: is refused at its next re-authentication, within this (docs/metaserver.md, "Revocation")
REAUTH_MS = 30_000


def _secret(path: Path) -> str:
    """The secret kept in ``path`` (0600, its folder 0700), made at first use."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = secrets.token_urlsafe(24)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another node of the cluster made it first: theirs stands
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    return secret


def stack_secret(home: Path, name: str) -> str:
    """A random secret of the stack kept in ``<home>/secrets/<name>`` (0600), made at first use."""
    return _secret(home / "secrets" / name)


def admin_password_dir(home: Path) -> Path:
    """The folder of the super user's per-cluster passwords (the MetaServer's ``--kafka-admin-password-dir``)."""
    return home / "secrets" / "kafka-admin"


def admin_password(home: Path, cluster: str) -> str:
    """``cluster``'s super-user password: its own (issue 37: one password served every secured cluster of a
    stack, so one node's files opened them all), made at its first ``up``, kept 0600 in
    ``<home>/secrets/kafka-admin/<cluster>.password``. A home made before keeps its one password for the clusters
    it formatted with it (their storage holds it): recreate the home to give each its own."""
    path = admin_password_dir(home) / f"{cluster}.password"
    legacy = home / "secrets" / "kafka-admin.password"
    if not path.exists() and legacy.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(legacy.read_text().strip())
    return _secret(path)


@dataclass(frozen=True)
class NodeSecrets:
    """One secured cluster's own node credentials: the inter-broker SCRAM user's and the controller listener's
    PLAIN password. Per cluster, so one cluster's files never open another's controller."""

    broker_password: str
    controller_password: str


def node_secrets(home: Path, cluster: str) -> NodeSecrets:
    """``cluster``'s node passwords, made at its first ``up``, kept 0600 under ``<home>/secrets``."""
    folder = home / "secrets"
    return NodeSecrets(_secret(folder / f"kafka-{cluster}-broker.password"),
                       _secret(folder / f"kafka-{cluster}-controller.password"))


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of the stack's certificate authority and of the broker certificate it signed."""

    ca_cert: Path
    broker_cert: Path  # the broker's certificate followed by the CA's (the chain Kafka presents)
    broker_key: Path  # PKCS#8, unencrypted, 0600

    def ca_pem(self) -> str:
        return self.ca_cert.read_text()


def make_tls(folder: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), days: int = 825) -> TlsFiles:
    """Create (once; kept across restarts) a CA and a broker certificate for ``hosts`` under ``folder``."""
    files = TlsFiles(folder / "ca.pem", folder / "broker-chain.pem", folder / "broker-key.pem")
    if files.ca_cert.exists() and files.broker_cert.exists() and files.broker_key.exists():
        return files
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ykafka dev stack CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    files.ca_cert.write_bytes(ca.public_bytes(pem))
    files.broker_cert.write_bytes(cert.public_bytes(pem) + ca.public_bytes(pem))
    fd = os.open(files.broker_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return files


def _jaas_value(text: str) -> str:
    if any(ch in text for ch in '"\\;\n'):
        raise ValueError("a JAAS value holds no quote, backslash, semicolon or newline")
    return text


def broker_properties(*, listener: str, protocol: str, admin_user: str, nodes: NodeSecrets,
                      tls: TlsFiles | None, reauth_ms: int, controller_listener: str = "CONTROLLER") -> dict[str, str]:
    """``server.properties`` entries that secure a KRaft node whose client (and inter-broker) listener
    ``listener`` speaks ``protocol``: SCRAM-SHA-512, ``StandardAuthorizer``, nobody allowed what no ACL grants.

    Every listener authenticates (docs/metaserver.md, "Threat model"). The node talks to its peers over
    ``listener`` as :data:`BROKER_USER` (SCRAM, written at storage format time by :func:`format_scram_args`);
    the KRaft controller listener speaks SASL_PLAINTEXT with PLAIN and accepts only :data:`CONTROLLER_USER`
    (its JAAS line is the one user list: an app's SCRAM credential, or none, is refused there). The super users
    are ``admin_user`` (the MetaServer) and these two node principals; never ``User:ANONYMOUS``.
    ``connections.max.reauth.ms`` bounds how long a connection authenticated before a credential was deleted
    keeps working. The JAAS lines hold passwords: the launcher writes ``server.properties`` 0600.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
    if protocol == "SASL_SSL" and tls is None:
        raise ValueError("SASL_SSL needs the broker's certificate (make_tls)")
    broker_pw, controller_pw = _jaas_value(nodes.broker_password), _jaas_value(nodes.controller_password)
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{BROKER_USER}" '
            f'password="{broker_pw}";')
    controller_jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                       f'username="{CONTROLLER_USER}" password="{controller_pw}" '
                       f'user_{CONTROLLER_USER}="{controller_pw}";')
    ctl = controller_listener.lower()
    props = {
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{listener.lower()}.scram-sha-512.sasl.jaas.config": jaas,
        "sasl.mechanism.controller.protocol": CONTROLLER_MECHANISM,
        f"listener.name.{ctl}.sasl.enabled.mechanisms": CONTROLLER_MECHANISM,
        f"listener.name.{ctl}.plain.sasl.jaas.config": controller_jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{admin_user};User:{BROKER_USER};User:{CONTROLLER_USER}",
        "connections.max.reauth.ms": str(reauth_ms),
    }
    if tls is not None and protocol == "SASL_SSL":
        keystore = tls.broker_cert.parent / "broker-keystore.pem"  # Kafka's PEM key store: key, then chain
        if not keystore.exists():
            fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(tls.broker_key.read_text() + tls.broker_cert.read_text())
        props.update({
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca_cert),
            "ssl.client.auth": "none",
            "ssl.endpoint.identification.algorithm": "https",
        })
    return props


#: the security protocol of the controller listener on a secured cluster
CONTROLLER_PROTOCOL = "SASL_PLAINTEXT"


def format_scram_args(admin_user: str, admin_password: str, nodes: NodeSecrets) -> list[str]:
    """``kafka-storage format`` arguments that create the super user's and the nodes' SCRAM credentials with
    the metadata log, so a node can authenticate its own inter-broker connection before any admin call exists."""
    return ["--add-scram", f"{MECHANISM}=[name={admin_user},password={admin_password}]",
            "--add-scram", f"{MECHANISM}=[name={BROKER_USER},password={nodes.broker_password}]"]


def client_properties(*, protocol: str, username: str, password: str, ca_pem: str | None) -> dict[str, str]:
    """librdkafka properties of a client authenticating as ``username`` over ``protocol``."""
    props = {"security.protocol": protocol, "sasl.mechanism": MECHANISM, "sasl.username": username,
             "sasl.password": password}
    if protocol == "SASL_SSL" and ca_pem:
        props["ssl.ca.pem"] = ca_pem
    return props
