"""A PKCS#12 truststore that JVMs accept: every certificate of a PEM bundle as a trusted entry.

Java ignores certificates in a PKCS#12 file unless each carries Oracle's "trusted key usage"
attribute (that is why mitmproxy's `mitmproxy-ca-cert.p12` does not work as a truststore), and
the `cryptography` versions mitmproxy allows cannot write that attribute. The file is simple
enough to write directly: unencrypted certificate bags (certificates are public) in one
SafeContents, with an HMAC-SHA1 integrity MAC keyed from the password (RFC 7292), which every
JVM since 8 reads.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

PASSWORD = "undoproxy"  # integrity only: a truststore holds public certificates

_DATA = "1.2.840.113549.1.7.1"
_CERT_BAG = "1.2.840.113549.1.12.10.1.3"
_X509 = "1.2.840.113549.1.9.22.1"
_FRIENDLY_NAME = "1.2.840.113549.1.9.20"
_ORACLE_TRUSTED_KEY_USAGE = "2.16.840.1.113894.746875.1.1"
_ANY_EXTENDED_KEY_USAGE = "2.5.29.37.0"
_SHA1 = "1.3.14.3.2.26"
_ITERATIONS = 10000


def _tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    else:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + length + content


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _set(*items: bytes) -> bytes:
    return _tlv(0x31, b"".join(sorted(items)))


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _octets(value: bytes) -> bytes:
    return _tlv(0x04, value)


def _explicit(value: bytes) -> bytes:
    return _tlv(0xA0, value)


def _oid(dotted: str) -> bytes:
    parts = [int(p) for p in dotted.split(".")]
    out = bytearray([40 * parts[0] + parts[1]])
    for part in parts[2:]:
        chunk = [part & 0x7F]
        part >>= 7
        while part:
            chunk.append(0x80 | (part & 0x7F))
            part >>= 7
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _cert_bag(cert: x509.Certificate, alias: str) -> bytes:
    attributes = _set(
        _seq(_oid(_FRIENDLY_NAME), _set(_tlv(0x1E, alias.encode("utf-16-be")))),
        _seq(_oid(_ORACLE_TRUSTED_KEY_USAGE), _set(_oid(_ANY_EXTENDED_KEY_USAGE))),
    )
    bag = _seq(_oid(_X509), _explicit(_octets(cert.public_bytes(Encoding.DER))))
    return _seq(_oid(_CERT_BAG), _explicit(bag), attributes)


def _pkcs12_kdf(password: str, salt: bytes, iterations: int, size: int = 20) -> bytes:
    """RFC 7292 appendix B.2 with SHA-1, purpose 3 (MAC key)."""
    v, u = 64, 20
    pw = (password + "\0").encode("utf-16-be")

    def fill(data: bytes) -> bytes:
        n = v * ((len(data) + v - 1) // v)
        return (data * (n // len(data) + 1))[:n] if data else b""

    material = bytearray(fill(salt) + fill(pw))
    out = b""
    while len(out) < size:
        a = bytes([3]) * v + bytes(material)
        for _ in range(iterations):
            a = hashlib.sha1(a).digest()
        out += a
        b = int.from_bytes((a * (v // u + 1))[:v], "big")
        for j in range(0, len(material), v):
            block = (int.from_bytes(material[j : j + v], "big") + b + 1) % (1 << (8 * v))
            material[j : j + v] = block.to_bytes(v, "big")
    return out[:size]


def truststore(pem: bytes, password: str = PASSWORD) -> bytes:
    """The PKCS#12 bytes of a truststore holding every certificate in `pem`."""
    certs = x509.load_pem_x509_certificates(pem)
    bags = [_cert_bag(cert, f"undoproxy-{i}") for i, cert in enumerate(certs)]
    safe_contents = _seq(*bags)
    auth_safe = _seq(_seq(_oid(_DATA), _explicit(_octets(safe_contents))))
    salt = secrets.token_bytes(20)
    key = _pkcs12_kdf(password, salt, _ITERATIONS)
    digest = hmac.new(key, auth_safe, hashlib.sha1).digest()
    mac = _seq(
        _seq(_seq(_oid(_SHA1), b"\x05\x00"), _octets(digest)), _octets(salt), _int(_ITERATIONS)
    )
    return _seq(_int(3), _seq(_oid(_DATA), _explicit(_octets(auth_safe))), mac)
