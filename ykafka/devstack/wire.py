"""A few Kafka admin requests spoken on a raw socket, to probe a listener as an outside attacker would.

librdkafka cannot talk to a KRaft controller listener (it expects a broker's metadata), and it hides what the
listener answered behind its own retries; an attacker needs neither. :class:`Probe` opens one TCP connection,
optionally authenticates (SASL/PLAIN or SCRAM-SHA-512, the only mechanisms the stack uses) and sends
DescribeAcls, CreateAcls, AlterUserScramCredentials or DeleteTopics with a valid body, returning the error code
the listener answered, or :data:`CLOSED` when it dropped the connection instead (what a SASL listener does to a
request sent before authentication). Used by ``samples/broker_security.py`` and tests/test_broker_attacks.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
from dataclasses import dataclass

#: what :meth:`Probe.request` returns when the listener closed the connection instead of answering
CLOSED = -100
#: Kafka error codes the probes name (the protocol's ``ErrorCodes``)
NONE = 0
CLUSTER_AUTHORIZATION_FAILED = 31
TOPIC_AUTHORIZATION_FAILED = 29
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

_API_VERSIONS, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 17, 36
_DESCRIBE_ACLS, _CREATE_ACLS, _DELETE_TOPICS, _ALTER_SCRAM = 29, 30, 20, 51


class ProbeClosed(ConnectionError):
    """The listener closed the connection (or never answered within the timeout)."""


def _str(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_bytes(raw: bytes) -> bytes:
    return _uvarint(len(raw) + 1) + raw


@dataclass
class _Reader:
    data: bytes
    at: int = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        text = self.data[self.at:self.at + size].decode()
        self.at += size
        return text

    def blob(self) -> bytes:
        size = self.take(">i")
        raw = self.data[self.at:self.at + max(size, 0)]
        self.at += max(size, 0)
        return raw


class Probe:
    """One connection to ``host:port``; every call returns a Kafka error code or :data:`CLOSED`."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self._correlation = 0
        self.closed = False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _send(self, api_key: int, version: int, body: bytes, flexible: bool = False) -> bytes:
        """The response body (after its header) of one request; :class:`ProbeClosed` if the peer hung up."""
        if self.closed:
            raise ProbeClosed("closed earlier")
        self._correlation += 1
        header = struct.pack(">hhi", api_key, version, self._correlation) + _str("ykafka-probe")
        if flexible:
            header += b"\x00"  # no tagged fields
        frame = header + body
        try:
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", self._read(4))[0]
            data = self._read(size)
        except (OSError, ProbeClosed) as exc:
            self.closed = True
            raise ProbeClosed(str(exc)) from None
        skip = 4 + (1 if flexible and api_key != _API_VERSIONS else 0)  # correlation id (+ empty tagged fields)
        return data[skip:]

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ProbeClosed("connection closed by the listener")
            out += chunk
        return out

    def api_keys(self) -> set[int]:
        """The API keys this listener offers (ApiVersions v0; answered before authentication too)."""
        reader = _Reader(self._send(_API_VERSIONS, 0, b""))
        if reader.take(">h") != NONE:
            return set()
        keys = set()
        for _ in range(reader.take(">i")):
            keys.add(reader.take(">h"))
            reader.take(">h")
            reader.take(">h")
        return keys

    # --- authentication ---------------------------------------------------------------------------

    def _handshake(self, mechanism: str) -> int:
        reader = _Reader(self._send(_SASL_HANDSHAKE, 1, _str(mechanism)))
        return reader.take(">h")

    def _authenticate(self, payload: bytes) -> tuple[int, bytes]:
        reader = _Reader(self._send(_SASL_AUTHENTICATE, 0, struct.pack(">i", len(payload)) + payload))
        code = reader.take(">h")
        reader.string()
        return code, reader.blob()

    def login(self, mechanism: str, username: str, password: str) -> int:
        """SASL handshake and authentication; the error code (0: authenticated) or :data:`CLOSED`."""
        try:
            code = self._handshake(mechanism)
            if code != NONE:
                return code
            if mechanism == "PLAIN":
                return self._authenticate(f"\0{username}\0{password}".encode())[0]
            if mechanism == "SCRAM-SHA-512":
                return self._scram(username, password)
            raise ValueError(f"mechanism {mechanism!r} is not probed")
        except ProbeClosed:
            return CLOSED

    def _scram(self, username: str, password: str) -> int:
        nonce = base64.b64encode(os.urandom(18)).decode()
        bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={nonce}"
        code, first = self._authenticate(f"n,,{bare}".encode())
        if code != NONE:
            return code
        fields = dict(part.split("=", 1) for part in first.decode().split(","))
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
        stored = hashlib.sha512(client_key).digest()
        final_bare = f"c=biws,r={fields['r']}"
        message = f"{bare},{first.decode()},{final_bare}".encode()
        signature = hmac.new(stored, message, hashlib.sha512).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        code, _ = self._authenticate(f"{final_bare},p={base64.b64encode(proof).decode()}".encode())
        return code

    # --- the admin requests an attacker wants -------------------------------------------------------

    def request(self, name: str, **args: str) -> int:
        """One of ``describe_acls``, ``create_acls`` (``principal``, ``topic``), ``alter_scram`` (``user``,
        ``password``), ``delete_topics`` (``topic``); its error code or :data:`CLOSED`."""
        try:
            return getattr(self, f"_{name}")(**args)
        except ProbeClosed:
            return CLOSED

    def _describe_acls(self) -> int:
        body = struct.pack(">b", 1) + _str(None) + struct.pack(">b", 1) + _str(None) + _str(None) + \
            struct.pack(">bb", 1, 1)  # ANY resource, any name, ANY pattern, any principal and host, ANY op / perm
        reader = _Reader(self._send(_DESCRIBE_ACLS, 1, body))
        reader.take(">i")  # throttle
        return reader.take(">h")

    def _create_acls(self, principal: str = "User:intruder", topic: str = "*") -> int:
        body = struct.pack(">i", 1) + struct.pack(">b", 2) + _str(topic) + struct.pack(">b", 3) + _str(principal) \
            + _str("*") + struct.pack(">bb", 3, 3)  # TOPIC literal, READ, ALLOW
        reader = _Reader(self._send(_CREATE_ACLS, 1, body))
        reader.take(">i")
        if reader.take(">i") < 1:
            return NONE
        return reader.take(">h")

    def _alter_scram(self, user: str = "intruder", password: str = "let-me-in") -> int:
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
        name = user.encode()
        upsert = _uvarint(len(name) + 1) + name + struct.pack(">bi", 2, 4096) + _compact_bytes(salt) \
            + _compact_bytes(salted) + b"\x00"  # SCRAM-SHA-512 is mechanism 2
        body = _uvarint(1) + _uvarint(2) + upsert + b"\x00"  # no deletions, one upsertion, no tagged fields
        reader = _Reader(self._send(_ALTER_SCRAM, 0, body, flexible=True))
        reader.take(">i")
        if reader.uvarint() - 1 < 1:
            return NONE
        size = reader.uvarint() - 1  # the user's name (read before moving past it)
        reader.at += size
        return reader.take(">h")

    def _delete_topics(self, topic: str = "victim") -> int:
        body = struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 5000)
        reader = _Reader(self._send(_DELETE_TOPICS, 1, body))
        reader.take(">i")
        if reader.take(">i") < 1:
            return NONE
        reader.string()
        return reader.take(">h")
