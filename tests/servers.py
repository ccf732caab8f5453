"""Test fixtures that run real storage servers on 127.0.0.1: a GCS emulator and moto's S3 server.

Each server runs as a subprocess on a free port behind a `Relay`, a small TCP relay the tests
use to inject faults (refused connections, reset connections, HTTP 429/503 answers) without
mocking any client library. Clients (Beam, google-cloud-storage, boto3) talk to the relay; the
`put`/`get`/`keys` helpers talk to the server directly, so they keep working while a fault is on.

tests/conftest.py registers this module as a pytest plugin: a test takes `gcs`, `s3`, `store`,
... as arguments, without importing them, and the whole session shares one server of each kind
(an import per module would start one per module).

TensorFlow's own GCS filesystem (what pipeline/reader/dataset.py uses for gs://) has its endpoints
compiled in (https://storage.googleapis.com, https://www.googleapis.com) and no emulator
setting. `tensorflow_gcs_env` therefore starts `GoogleApisFront`: an HTTPS proxy on 127.0.0.1
whose certificate (for *.googleapis.com, from a throw-away test CA) TensorFlow's libcurl trusts
through CURL_CA_BUNDLE, and which hands each request to the emulator. TensorFlow reaches it
through HTTPS_PROXY and authenticates with GOOGLE_AUTH_TOKEN_FOR_TESTING; give the returned
variables to a subprocess (TensorFlow reads them when its filesystem starts).

How the clients are pointed at the servers (the same settings work for a whole conversion,
DirectRunner worker subprocesses included, because they inherit the environment):
  * GCS: `STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` (google-cloud-storage, hence Beam's
    GCSFileSystem). Beam looks up Application Default Credentials before every GCS client and,
    when none exist, retries for ~20 s before going anonymous; `GOOGLE_APPLICATION_CREDENTIALS`
    therefore points at a fake `authorized_user` file whose token is valid until 2099, which
    google-auth accepts without any network call.
  * S3: Beam pipeline options `--s3_endpoint_url=http://127.0.0.1:PORT --s3_region_name=us-east-1`
    (`S3Server.beam_args`); keys come from boto3's chain (`AWS_ACCESS_KEY_ID`/`..._SECRET_...`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = [
    "Relay",
    "ServerProcess",
    "GcsServer",
    "S3Server",
    "cloud_env",
    "gcs",
    "s3",
    "store",
    "beam_filesystems",
    "GoogleApisFront",
    "tensorflow_gcs_env",
    "googleapis_front",
    "ProxyTrap",
    "past_the_second",
    "put_corpus",
    "wait_until",
]

HOST = "127.0.0.1"
# Both servers start in 1-5 s on an idle machine; 60 s leaves room for a loaded 2-core CI box.
STARTUP_TIMEOUT_S = 60.0
S3_REGION = "us-east-1"
# moto accepts any key pair; boto3 still refuses to sign without one.
FAKE_AWS_KEY = "testing"
TEST_PROJECT = "imgrec-test"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _server_main(kind: str) -> list[str]:
    """The command that starts the `kind` ("gcs", "s3") server: the package's own, with a
    per-request cost taken out (tests/storage_servers.py)."""
    return [sys.executable, str(Path(__file__).with_name("storage_servers.py")), kind]


# ---------------------------------------------------------------------------------------------
# A proxy that notes who calls out
# ---------------------------------------------------------------------------------------------


class ProxyTrap:
    """An HTTP(S) proxy on 127.0.0.1 that answers nobody: it notes each request's first line
    ("CONNECT github.com:443 HTTP/1.0") and closes the connection, so a caller fails at once
    instead of hanging (a real proxy that never answers would hang it).

    `env` is what points urllib, requests and libcurl at it; `calls` what reached it. A
    conversion run with `env` must leave `calls` empty: it downloads nothing at run time.
    Loopback addresses stay off the trap (NO_PROXY): it is for calls that leave the machine.
    A CI run once saw a request of another test's to the session's GCS emulator on 127.0.0.1
    (`GET .../storage/v1/b/dst-...?projection=noAcl`, made in the same test worker while the
    trap's variables were set) fail a conversion test that had called nothing.
    """

    def __init__(self):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((HOST, 0))
        self._listener.listen(16)
        self._closed = False
        self.calls: list[str] = []
        url = f"http://{HOST}:{self._listener.getsockname()[1]}"
        self.env = {
            name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        }
        loopback = "127.0.0.1,localhost,::1"
        self.env.update(NO_PROXY=loopback, no_proxy=loopback)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while (conn := _accept(self._listener, lambda: self._closed)) is not None:
            with contextlib.suppress(OSError):
                conn.settimeout(5)
                self.calls.append(conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace"))
            _reset(conn)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> ProxyTrap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Fault-injecting relay
# ---------------------------------------------------------------------------------------------


def _reset(sock: socket.socket) -> None:
    """Kill `sock` as a crashed peer would: RST on close (SO_LINGER 0). The shutdown comes first
    because closing a socket another thread is blocked on does nothing on Linux until that
    call returns, and the peer would wait forever."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def _accept(
    listener: socket.socket, closed: Callable[[], bool], errors: list[str] | None = None
) -> socket.socket | None:
    """The next client of `listener`, or None once `closed()` says it was closed on purpose.

    Any other accept() error (a client that reset before it was accepted, ECONNABORTED, or a
    full fd table) is noted in `errors` and waited out: giving up there left the port listening
    with nobody accepting, and the next client (a conversion, TensorFlow's GCS requests) hung
    until its timeout.
    """
    while True:
        try:
            return listener.accept()[0]
        except OSError as e:
            if closed():
                return None
            if errors is not None:
                errors.append(f"accept: {e!r}")
            time.sleep(0.01)


# An HTTP/1.1 request line at the start of a line: method, target.
_REQUEST_LINE = re.compile(rb"(?:^|\r\n)(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]\r\n")


class Relay:
    """A TCP relay in front of a server, with switches that make the server look faulty.

    States: `up()` relays bytes both ways; `down()` closes the listening port (new connections
    are refused) and resets every open connection; `reset_connections()` resets open ones only;
    `fail_next(n, status)` answers the next `n` HTTP requests with `status` itself (after
    resetting open keep-alive connections so that the next requests arrive on fresh ones).
    """

    def __init__(self, target_port: int, error_body: Callable[[int], tuple[str, bytes]]):
        self.target_port = target_port
        self.port = free_port()
        self._error_body = error_body
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._fail_left = 0
        self._fail_status = 503
        self._fail_match: bytes | None = None
        self._cut_after: int | None = None
        self._cut_down_for: float | None = None
        self._timers: list[threading.Timer] = []
        self.uploaded = 0  # bytes relayed client -> server since the last cut_after()
        self.injected = 0  # HTTP error answers sent so far
        self.accepted = 0  # connections relayed so far
        self.requests: list[tuple[str, str]] = []  # (method, target) of each HTTP request relayed
        self.up()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def up(self) -> None:
        """(Re)open the listening port and relay again."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((HOST, self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept_loop, args=(listener,), daemon=True).start()

    def down(self, for_s: float | None = None) -> None:
        """Refuse new connections and reset open ones: the server looks stopped. With `for_s`,
        come back `up()` that many seconds later (timed from now, not from the test's start, so a
        slow machine cannot make the outage outlast the client's retries)."""
        if for_s is not None:
            self._come_back_in(for_s)
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.reset_connections()

    def reset_connections(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            _reset(c)

    def fail_next(self, n: int, status: int = 503, match: bytes | None = None) -> None:
        """Answer the next `n` HTTP requests with `status` (429, 500, 503, ...); with `match`,
        only requests whose first bytes (request line, headers) contain it."""
        with self._lock:
            self._fail_left = n
            self._fail_status = status
            self._fail_match = match
        self.reset_connections()

    def heal(self) -> None:
        """Cancel every pending fault (timed come-backs included) and relay again."""
        with self._lock:
            self._fail_left = 0
            self._cut_after = None
            self._cut_down_for = None
            timers, self._timers = self._timers, []
        for t in timers:
            t.cancel()
        self.up()

    def cut_after(self, nbytes: int, down_for: float | None = None) -> None:
        """Go `down()` once `nbytes` more bytes have gone from clients to the server: the server
        dies in the middle of an upload. With `down_for`, it comes back that many seconds after
        the cut."""
        with self._lock:
            self.uploaded = 0
            self._cut_after = nbytes
            self._cut_down_for = down_for

    def _come_back_in(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self.up)
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    @property
    def failing(self) -> int:
        with self._lock:
            return self._fail_left

    def _accept_loop(self, listener: socket.socket) -> None:
        def closed() -> bool:  # by down()
            with self._lock:
                return self._listener is not listener

        while (client := _accept(listener, closed)) is not None:
            with self._lock:
                if self._listener is not listener:
                    _reset(client)
                    return
                self.accepted += 1
                self._conns.add(client)
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        """Connect upstream only once the client has sent its first bytes: the GCS emulator serves
        one connection at a time, so an idle pooled connection would otherwise block it."""
        try:
            first = client.recv(1 << 16)
        except OSError:
            first = b""
        if not first:
            self._drop(client)
            return
        with self._lock:
            status = 0
            if self._fail_left > 0 and (self._fail_match is None or self._fail_match in first):
                self._fail_left -= 1
                status = self._fail_status
        if status:
            self._answer_error(client, status, first)
            return
        try:
            upstream = socket.create_connection((HOST, self.target_port), timeout=10)
            upstream.settimeout(None)
        except OSError:
            self._drop(client)
            return
        with self._lock:
            if client not in self._conns:  # reset by down() meanwhile
                _reset(upstream)
                return
            self._conns.add(upstream)
        done = [0]
        threading.Thread(
            target=self._pump, args=(upstream, client, done, False), daemon=True
        ).start()
        self._pump(client, upstream, done, True, first)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.discard(sock)
        _reset(sock)

    def _pump(
        self, src: socket.socket, dst: socket.socket, done: list[int], up: bool, data: bytes = b""
    ) -> None:
        try:
            while True:
                data = data or src.recv(1 << 16)
                if not data:
                    break
                if up:
                    self._note_requests(data)
                if up and self._count_upload(len(data)):
                    with self._lock:
                        down_for, self._cut_down_for = self._cut_down_for, None
                    threading.Thread(target=self.down, args=(down_for,), daemon=True).start()
                    break
                dst.sendall(data)
                data = b""
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self._lock:
            done[0] += 1
            last = done[0] == 2
            if last:
                self._conns.difference_update((src, dst))
        if last:  # both directions ended: close the pair
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def _note_requests(self, data: bytes) -> None:
        """Log the request lines in client bytes (a request's head arrives in one piece: the
        clients send it with one write; an upload body that happened to hold one would add a
        line, never hide one)."""
        found = [(m[1].decode(), m[2].decode()) for m in _REQUEST_LINE.finditer(data)]
        if found:
            with self._lock:
                self.requests.extend(found)

    def _count_upload(self, n: int) -> bool:
        """Count uploaded bytes; True when a pending cut_after() is due."""
        with self._lock:
            self.uploaded += n
            if self._cut_after is not None and self.uploaded >= self._cut_after:
                self._cut_after = None
                return True
            return False

    def _answer_error(self, client: socket.socket, status: int, head: bytes) -> None:
        client.settimeout(10)
        try:
            while b"\r\n\r\n" not in head and len(head) < 1 << 16:
                chunk = client.recv(1 << 16)
                if not chunk:
                    return
                head += chunk
            header, _, body = head.partition(b"\r\n\r\n")
            length = 0
            for line in header.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or 0)
            while len(body) < length:  # drain the request body so the client sees the answer
                chunk = client.recv(min(1 << 16, length - len(body)))
                if not chunk:
                    break
                body += chunk
            content_type, payload = self._error_body(status)
            reason = {
                429: "Too Many Requests",
                500: "Internal Server Error",
                502: "Bad Gateway",
                503: "Service Unavailable",
                504: "Gateway Timeout",
            }.get(status, "Error")
            client.sendall(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            with self._lock:
                self.injected += 1
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(client)
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)  # a graceful close: the answer must arrive
            with contextlib.suppress(OSError):
                client.close()


def _gcs_error(status: int) -> tuple[str, bytes]:
    body = {
        "error": {
            "code": status,
            "message": f"injected by the test relay ({status})",
            "errors": [{"reason": "backendError", "message": "injected"}],
        }
    }
    return "application/json", json.dumps(body).encode()


def _s3_error(status: int) -> tuple[str, bytes]:
    code = "SlowDown" if status in (429, 503) else "InternalError"
    return "application/xml", (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the test relay ({status})</Message></Error>"
    ).encode()


# ---------------------------------------------------------------------------------------------
# Server processes
# ---------------------------------------------------------------------------------------------


class ServerProcess:
    """A server subprocess on a fixed 127.0.0.1 port that can be stopped and started again."""

    def __init__(self, name: str, argv: list[str], port: int, ready_path: str, log: Path):
        self.name = name
        self.argv = argv
        self.port = port
        self.ready_path = ready_path
        self.log = log
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"{self.name} did not come up on {self.url} ({last}); log:\n{tail}")

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclasses.dataclass
class _Store:
    """What the tests share about one storage server; subclasses add the client helpers."""

    scheme: str
    server: ServerProcess
    relay: Relay

    def new_bucket(self, prefix: str = "imgrec") -> str:
        """Create a bucket with a fresh name and return the name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self._create_bucket(name)
        return name

    def uri(self, bucket: str, key: str = "") -> str:
        return f"{self.scheme}://{bucket}/{key}"

    def put(self, uri: str, data: bytes) -> None:
        raise NotImplementedError

    def get(self, uri: str) -> bytes:
        raise NotImplementedError

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key in `bucket` under `prefix`, sorted, read from the server directly."""
        raise NotImplementedError

    def _create_bucket(self, name: str) -> None:
        raise NotImplementedError

    @property
    def beam_args(self) -> list[str]:
        """Beam pipeline options that point Beam's filesystem for this scheme at the relay."""
        return []


def _split(uri: str) -> tuple[str, str]:
    _, _, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    return bucket, key


class GcsServer(_Store):
    """gcp-storage-emulator, reached by clients through `STORAGE_EMULATOR_HOST` (the relay).

    The emulator stores each object's `mediaLink` (the URL clients download from) with the
    Host header of the upload request; the helpers send the relay's address as Host so that
    objects they put are downloaded through the relay too.
    """

    @property
    def _client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=TEST_PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.server.url},
            extra_headers={"Host": f"{HOST}:{self.relay.port}"},
        )

    def _create_bucket(self, name: str) -> None:
        # Soft delete off, as a scratch bucket would have it: the emulator (like GCS) keeps a
        # deleted object's copy for 7 days by default, which imgrec never reads, and its
        # metadata file grew by 700 KB of them over one test worker's modules.
        bucket = self._client.create_bucket(name)
        bucket.soft_delete_policy.retention_duration_seconds = 0
        bucket.patch()

    def put(self, uri: str, data: bytes) -> None:
        bucket, key = _split(uri)
        self._client.bucket(bucket).blob(key).upload_from_string(data)

    def get(self, uri: str) -> bytes:
        bucket, key = _split(uri)
        return self._client.bucket(bucket).blob(key).download_as_bytes()

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        return sorted(b.name for b in self._client.list_blobs(bucket, prefix=prefix or None))

    def stop_process(self) -> None:
        """Stop the emulator process, between two of its writes.

        The emulator rewrites one JSON file of all metadata (`DATA/.cloudstorage/.meta`) on every
        change (atomically as the tests run it, tests/storage_servers.py; the emulator's own
        write is not). So the relay goes down first (clients see a dead server from this
        moment), the process is left to finish what it had been asked, and it is stopped once that file has stayed
        whole and unchanged for a moment: no request can reach it any more, so nothing is
        half-written.
        """
        self.relay.down()
        meta = self._data_dir() / ".meta"
        deadline = time.monotonic() + 10.0
        last, stable_since = None, time.monotonic()
        while time.monotonic() < deadline:
            try:
                seen = meta.read_bytes()
                json.loads(seen)
            except (OSError, ValueError):  # absent, or caught in the middle of a write
                seen = None
            if seen is None or seen != last:
                last, stable_since = seen, time.monotonic()
            elif time.monotonic() - stable_since >= 0.3:
                break
            time.sleep(0.05)
        self.server.stop()
        if meta.exists():  # (absent until the first bucket is made)
            try:
                json.loads(meta.read_bytes())
            except ValueError as e:
                raise RuntimeError(f"the emulator left its metadata file {meta} broken: {e}") from e

    def start_process(self) -> None:
        """Start the emulator process again (its objects are on disk) and let clients in."""
        self.server.start()
        self.relay.up()

    def _data_dir(self) -> Path:
        """Where the emulator keeps objects and `.meta`: `-d DIR`'s STORAGE_DIR subfolder."""
        from gcp_storage_emulator.storage import STORAGE_DIR

        argv = self.server.argv
        return Path(argv[argv.index("-d") + 1]) / STORAGE_DIR


class S3Server(_Store):
    """moto's S3 server; Beam reaches it through `beam_args` (the relay)."""

    @property
    def _client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.server.url,
            region_name=S3_REGION,
            aws_access_key_id=FAKE_AWS_KEY,
            aws_secret_access_key=FAKE_AWS_KEY,
        )

    def _create_bucket(self, name: str) -> None:
        self._client.create_bucket(Bucket=name)

    def put(self, uri: str, data: bytes) -> None:
        bucket, key = _split(uri)
        self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, uri: str) -> bytes:
        bucket, key = _split(uri)
        return self._client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        ):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    def multipart_uploads(self, bucket: str) -> list[str]:
        """Keys of multipart uploads begun and neither completed nor aborted."""
        r = self._client.list_multipart_uploads(Bucket=bucket)
        return sorted(u["Key"] for u in r.get("Uploads", []))

    @property
    def beam_args(self) -> list[str]:
        return [f"--s3_endpoint_url={self.relay.url}", f"--s3_region_name={S3_REGION}"]


# ---------------------------------------------------------------------------------------------
# HTTPS front for TensorFlow's GCS filesystem
# ---------------------------------------------------------------------------------------------

# The hosts TensorFlow's GCS filesystem calls: JSON API (stat, list) and media downloads.
GOOGLE_API_HOSTS = ("www.googleapis.com", "storage.googleapis.com")


def _write_test_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate it signed for *.googleapis.com (valid 2 days).

    Returns:
        (CA certificate PEM, server certificate chain PEM, server key PEM).
    """
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imgrec test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(h) for h in (*GOOGLE_API_HOSTS, "*.googleapis.com")]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_API_HOSTS[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class GoogleApisFront:
    """An HTTPS proxy (CONNECT) that answers for *.googleapis.com with the GCS emulator.

    Each tunnel is opened with TLS as the requested Google host, then its requests go, one per
    upstream connection, to `upstream_port` (the emulator answers HTTP/1.0 and closes).
    """

    def __init__(self, upstream_port: int, directory: Path):
        import ssl

        self.ca, cert, key = _write_test_ca(directory)
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(cert, key)
        self.upstream_port = upstream_port
        self.port = free_port()
        self.tunnels: list[str] = []  # "host:port" of every CONNECT, in order
        self._listener = socket.create_server((HOST, self.port))
        self._closed = False
        self.errors: list[str] = []  # what ended tunnels early, for a failing test's message
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def state(self) -> str:
        """One line for a failing test's message."""
        return f"front tunnels={len(self.tunnels)} errors={self.errors[-5:]}"

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept_loop(self) -> None:
        while (client := _accept(self._listener, lambda: self._closed, self.errors)) is not None:
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    @staticmethod
    def _read_head(f) -> bytes | None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = f.readline(1 << 16)
            if not line:
                return None
            head += line
        return head

    def _tunnel(self, client: socket.socket) -> None:
        import ssl

        client.settimeout(30)
        tls = None
        try:
            head = self._read_head(client.makefile("rb"))
            if head is None:
                return
            method, target = head.split(b" ", 2)[:2]
            host = target.decode().rsplit(":", 1)[0]
            if method != b"CONNECT" or host not in GOOGLE_API_HOSTS:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            self.tunnels.append(target.decode())
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            tls = self._ctx.wrap_socket(client, server_side=True)
            stream = tls.makefile("rb")
            while True:  # requests on this tunnel, each to a fresh upstream connection
                request = self._read_head(stream)
                if request is None:
                    break
                length = 0
                for line in request.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip() or 0)
                body = stream.read(length) if length else b""
                with socket.create_connection((HOST, self.upstream_port), timeout=30) as up:
                    up.sendall(request + body)
                    answer = b"".join(iter(lambda: up.recv(1 << 16), b""))
                tls.sendall(answer)
                if not answer.startswith(b"HTTP/1.1") or b"connection: close" in answer.lower():
                    break  # an HTTP/1.0 answer ends the connection for the client too
        except (OSError, ssl.SSLError, ValueError) as e:
            # The client gave up or the emulator is down: the client sees a dead link.
            self.errors.append(f"tunnel: {e!r}")
        finally:
            # Once wrapped, the TLS socket owns the connection (`client` is detached): close
            # that one, or the client waits on an open link that never answers.
            for sock in (tls, client):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

# A Google `authorized_user` credential whose access token google-auth takes as valid until
# 2099, so neither Beam nor google-cloud-storage ever asks Google for one. The emulator ignores
# the Authorization header.
_FAKE_ADC = {
    "type": "authorized_user",
    "client_id": "imgrec-test",
    "client_secret": "imgrec-test",
    "refresh_token": "imgrec-test",
    "token": "imgrec-test-token",
    "expiry": "2099-01-01T00:00:00Z",
    "quota_project_id": TEST_PROJECT,
}


@pytest.fixture(scope="session")
def cloud_env(tmp_path_factory) -> Iterator[Path]:
    """Environment for cloud clients that can only ever reach 127.0.0.1 (fake credentials)."""
    root = tmp_path_factory.mktemp("cloud_env")
    adc = root / "fake_adc.json"
    adc.write_text(json.dumps(_FAKE_ADC))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        mp.setenv("GOOGLE_CLOUD_PROJECT", TEST_PROJECT)
        mp.setenv("AWS_ACCESS_KEY_ID", FAKE_AWS_KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", FAKE_AWS_KEY)
        mp.setenv("AWS_DEFAULT_REGION", S3_REGION)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        for var in (
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
        ):
            mp.delenv(var, raising=False)
        mp.setenv("AWS_CONFIG_FILE", str(root / "no_aws_config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(root / "no_aws_credentials"))
        # Keep any retry budgets short and predictable: botocore's default "legacy" mode retries
        # 4 times; "standard" does the same with a documented backoff.
        mp.setenv("AWS_RETRY_MODE", "standard")
        yield root


@contextlib.contextmanager
def _gcs_server(root: Path) -> Iterator[GcsServer]:
    """Start a GCS emulator with its data under `root`; clients reach it through its relay."""
    port = free_port()
    server = ServerProcess(
        "gcp-storage-emulator",
        [
            *_server_main("gcs"),
            "-d",
            str(root / "data"),
            "start",
            "--host",
            HOST,
            "--port",
            str(port),
            "--project-number",
            "1234",
        ],
        port,
        "/",
        root / "server.log",
    )
    server.start()
    relay = Relay(port, _gcs_error)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", relay.url)
        try:
            yield GcsServer("gs", server, relay)
        finally:
            relay.down()
            server.stop()


@pytest.fixture(scope="session")
def gcs(cloud_env, tmp_path_factory) -> Iterator[GcsServer]:
    """A running GCS emulator (data on disk, so it survives `server.restart()`)."""
    with _gcs_server(tmp_path_factory.mktemp("gcs")) as server:
        yield server


@pytest.fixture
def own_gcs(cloud_env, tmp_path_factory) -> Iterator[GcsServer]:
    """A GCS emulator of this test's own, for a test that stops and restarts the process.

    Stop it with `stop_process()`, not `server.stop()`: clients are cut off first and the
    emulator finishes what it was asked before it stops. A private emulator also means no other
    test loses the session's one.
    """
    with _gcs_server(tmp_path_factory.mktemp("own_gcs")) as server:
        yield server


@pytest.fixture(scope="session")
def s3(cloud_env, tmp_path_factory) -> Iterator[S3Server]:
    """A running moto S3 server (state in memory: `server.restart()` loses it; use the relay)."""
    with _s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@contextlib.contextmanager
def _s3_server(root: Path) -> Iterator[S3Server]:
    """Start moto's S3 server (its log under `root`); clients reach it through its relay."""
    port = free_port()
    server = ServerProcess(
        "moto_server",
        [*_server_main("s3"), "-H", HOST, "-p", str(port)],
        port,
        "/",
        root / "server.log",
    )
    server.start()
    relay = Relay(port, _s3_error)
    try:
        yield S3Server("s3", server, relay)
    finally:
        relay.down()
        server.stop()


@pytest.fixture(scope="session")
def googleapis_front(gcs, tmp_path_factory) -> Iterator[GoogleApisFront]:
    """The HTTPS proxy that answers for *.googleapis.com with the session's GCS emulator."""
    front = GoogleApisFront(gcs.relay.port, tmp_path_factory.mktemp("googleapis_front"))
    try:
        yield front
    finally:
        front.close()


@pytest.fixture(scope="session")
def tensorflow_gcs_env(googleapis_front) -> dict[str, str]:
    """Environment variables that let TensorFlow's GCS filesystem (tf.io.gfile, tf.data) read
    and write gs:// on the emulator; pass them to a subprocess.

    A request that gets no byte for 15 s is aborted and retried by TensorFlow (its default
    waits 60 s per attempt): a lost link costs seconds, not the test's whole time limit.

    TensorFlow's GCS filesystem reads through a buffer of GCS_READ_CACHE_BLOCK_SIZE_MB
    (default 64 MB). The tests' shards are a few KB, and a training reader opens one per few
    batches: its process spent 3.1 s of system CPU against 2.2 s of user CPU in
    test_version_leases_gcs (strace: as many mmap/munmap pairs as new connections, 51 in 8 s),
    0.3 s with a 1 MB buffer, and the file's wall time went from 20 s to 14 s (2026-12-05). A
    dataset of the default 128 MB shards opens one per 128 MB read, where the 64 MB buffer costs
    nothing that matters; so only the tests set it.
    """
    front = googleapis_front
    return {
        "HTTPS_PROXY": front.url,
        "https_proxy": front.url,
        "CURL_CA_BUNDLE": str(front.ca),
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "imgrec-test-token",
        "NO_PROXY": "",
        "no_proxy": "",
        "GCS_REQUEST_CONNECTION_TIMEOUT_SECS": "10",
        "GCS_REQUEST_IDLE_TIMEOUT_SECS": "15",
        "GCS_READ_CACHE_BLOCK_SIZE_MB": "1",
    }


@pytest.fixture
def beam_filesystems(request) -> Iterator[list[str]]:
    """Point Beam's FileSystems at the servers the test uses; restore the old options after.

    Yields the Beam arguments it set (append them to a pipeline's argv as well).
    """
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    args: list[str] = []
    for name in ("s3", "store"):
        if name in request.fixturenames:
            args += request.getfixturevalue(name).beam_args
    previous = FileSystems._pipeline_options  # noqa: SLF001 - restored below
    FileSystems.set_options(PipelineOptions(args))
    try:
        yield args
    finally:
        FileSystems._pipeline_options = previous  # noqa: SLF001


@pytest.fixture(params=["gs", "s3"])
def store(request) -> Iterator[_Store]:
    """Each test that takes `store` runs once against the GCS emulator and once against S3."""
    server = request.getfixturevalue("gcs" if request.param == "gs" else "s3")
    server.relay.heal()
    yield server
    server.relay.heal()  # a test that left the link down must not break the next one


def put_corpus(
    store: _Store, bucket: str, src: str | os.PathLike, prefix: str = "photos/"
) -> list[str]:
    """Upload every file under the local folder `src` to `bucket` under `prefix`, keys named by
    their paths relative to `src` (`/`-separated); returns those relative names, sorted."""
    src = Path(src)
    names = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    for name in names:
        store.put(store.uri(bucket, prefix + name), (src / name).read_bytes())
    return names


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, every: float = 0.05) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def past_the_second(written_by: float) -> None:
    """Return once the clock is in a later second than `written_by` (a time.time() read after an
    object was written), so that an object put now is newer: S3 reports update times to the
    second. Waits only the rest of that second, if any (a fixed 1.1-s sleep before)."""
    time.sleep(max(0.0, int(written_by) + 1.0 - time.time()))
