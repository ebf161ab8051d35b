"""A read-only S3 endpoint in front of the cache, for code that reads ``s3://`` with boto3,
s3fs or any other S3 client: point the client at it (``AWS_ENDPOINT_URL_S3``, which the
admission webhook sets in a pod together with this gateway as the pod's own sidecar) and the
objects of the data sets it serves are read through the cache — hits from the tier, misses
from the source and written back — with no change to the code.

What it answers (path-style requests, which clients use for an endpoint URL they are given):

* ``GET``/``HEAD /<bucket>/<key>`` for a key under a served data set's source prefix: the
  object, whole or a ``Range`` (``bytes=a-b``, ``a-``, ``-n``; 206 with ``Content-Range``), with
  the source's ETag and size;
* ``GET /<bucket>?list-type=2`` (ListObjectsV2: ``prefix``, ``delimiter``, ``max-keys``,
  ``continuation-token``, ``start-after``) and the older ListObjects (``marker``), over the
  served data sets' files; ``HEAD /<bucket>``; ``GET /<bucket>?location``; ``GET /``;
* anything else is refused with an S3 error saying why: a write (403 ``AccessDenied``: the
  endpoint is read-only, write with a client given the source's own endpoint), a key of the
  bucket outside every served data set (404 ``NoSuchKey`` naming what is served), a bucket it
  does not serve (404 ``NoSuchBucket``), another sub-resource (501 ``NotImplemented``).

Requests are not authenticated: any signature is accepted. The gateway is meant to listen on
the pod's loopback (its default), where only the pod's own containers reach it; it reads the
sources with its own AWS environment (the webhook gives it the reading container's). So an
address other than loopback is refused unless asked for with ``allow_remote``
(``--allow-remote``): whoever reaches it reads the served data sets with those credentials. Served
bytes always come from the source or from chunks that hashed to their ids when they were
stored; a tier that fails is bypassed (the reader's breaker), never a wrong answer.

    python -m alnair_dataset.s3_gateway --dataset imagenet --dataset coco --listen 127.0.0.1:9494
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from ._errors import DatasetError, SourceChangedError
from ._reader import DatasetReader
from ._sources import S3Source

log = logging.getLogger("alnair_dataset.s3_gateway")
DEFAULT_LISTEN = "127.0.0.1:9494"
MAX_KEYS = 1000
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class S3Failure(Exception):
    """An S3 error response: HTTP status, S3 code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class _Served:
    bucket: str
    prefix: str  # "" or ending in "/"
    reader: DatasetReader


def _interrupt(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM while serving: leave serve_forever as Ctrl-C does."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


class S3Gateway:
    """Serves the s3:// data sets of ``readers`` (readers of other sources are refused)."""

    def __init__(self, readers: Sequence[DatasetReader], listen: str = DEFAULT_LISTEN, *,
                 allow_remote: bool = False) -> None:
        host, _, port = listen.rpartition(":")
        if not allow_remote and not _loopback(host or "127.0.0.1"):
            raise ValueError(
                f"listen address {listen!r} is not loopback: the gateway does not authenticate "
                "requests, so anyone who reaches it would read the served data sets with this "
                "process's AWS credentials; listen on 127.0.0.1 (or ::1), or allow it knowingly "
                "with --allow-remote")
        served = []
        for r in readers:
            if not isinstance(r.source, S3Source):
                raise ValueError(f"data set {r.name!r} comes from {r.source!r}, not s3://: the S3 "
                                 "gateway serves only s3:// data sets (mount others as files)")
            served.append(_Served(r.source.bucket, r.source.prefix, r))
        # The longest prefix first: a key belongs to the most specific data set.
        self.served = sorted(served, key=lambda s: -len(s.prefix))
        gateway = self

        class Handler(_Handler):
            owner = gateway

        self.server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def buckets(self) -> list[str]:
        return sorted({s.bucket for s in self.served})

    def describe(self, bucket: str | None = None) -> str:
        return ", ".join(f"s3://{s.bucket}/{s.prefix} (data set {s.reader.name})"
                         for s in self.served if bucket in (None, s.bucket)) or "nothing"

    def start(self) -> S3Gateway:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="alnair-s3-gateway")
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve in this thread until SIGINT (Ctrl-C) or SIGTERM, then close. Both are
        handled here (in the main thread): a process started where SIGINT is ignored — any
        background job of a shell script inherits that, and Python then never turns it into
        KeyboardInterrupt — would not stop on it, and SIGTERM would end the process without
        closing its readers (their leases then keep the data sets in use until they expire)."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()

    def close(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve_forever to end: only one running
            self.server.shutdown()
            self._thread.join()
            self._thread = None
        self.server.server_close()
        for s in self.served:
            s.reader.close()

    # -- what a request names ---------------------------------------------------------------

    def locate(self, bucket: str, key: str) -> tuple[DatasetReader, str]:
        """The reader and file path of an object, or the S3 error that says why not."""
        if bucket not in self.buckets():
            raise S3Failure(404, "NoSuchBucket", f"bucket {bucket!r} is not served here; this "
                            f"endpoint (Alnair's dataset cache) serves {self.describe()}")
        for s in self.served:
            if s.bucket == bucket and key.startswith(s.prefix):
                path = key[len(s.prefix):]
                if s.reader.has(path):
                    return s.reader, path
        raise S3Failure(404, "NoSuchKey", f"s3://{bucket}/{key} is not a file of the data sets "
                        f"this endpoint (Alnair's dataset cache) serves: {self.describe(bucket)}; "
                        "read other objects with a client given the source's own endpoint")

    def keys(self, bucket: str) -> list[tuple[str, int, str]]:
        """(key, size, etag) of every served object of ``bucket``, sorted by key."""
        out: dict[str, tuple[str, int, str]] = {}
        for s in self.served:
            if s.bucket == bucket:
                for path in s.reader.files():
                    f = s.reader.file(path)
                    out.setdefault(s.prefix + path, (s.prefix + path, f.size, f.version))
        return [out[k] for k in sorted(out)]


class _Handler(BaseHTTPRequestHandler):
    owner: S3Gateway
    protocol_version = "HTTP/1.1"
    server_version = "alnair-s3-gateway"
    # Headers and body go out as separate writes: with Nagle's algorithm on, the body waits
    # for the client's delayed ACK of the headers, 40 ms per small object.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base's name
        log.debug(format, *args)

    # -- verbs ------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 — http.server's names
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_PUT(self) -> None:  # noqa: N802
        self._refuse_write()

    do_POST = do_DELETE = do_PATCH = do_PUT  # noqa: N815

    def _refuse_write(self) -> None:
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not re.fullmatch(r"[0-9]{1,12}", declared):
            # read(-1) would wait for the client to close; a length past 1 TB is no body
            self.close_connection = True
            self._error(S3Failure(400, "InvalidArgument", f"Content-Length {declared[:40]!r} is "
                                  "not a length in bytes"), body=True)
            return
        if length := int(declared):
            self.rfile.read(length)  # the body, so the connection stays usable
        self._error(S3Failure(403, "AccessDenied", (
            f"{self.command} refused: this endpoint is Alnair's read-only dataset cache "
            f"({self.owner.describe()}); write with an S3 client given the source's own endpoint "
            "(endpoint_url=..., or a container without AWS_ENDPOINT_URL_S3)")), body=True)

    # -- answers ----------------------------------------------------------------------------

    def _answer(self, *, body: bool) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        try:
            if not bucket:
                self._xml(_list_buckets(self.owner.buckets()), body)
            elif not key:
                self._bucket(bucket, query, body)
            elif set(query) - {"partNumber", "versionId", "x-id"}:
                raise S3Failure(501, "NotImplemented", f"?{'&'.join(sorted(query))} on an object "
                                "is not served by Alnair's read-only dataset cache")
            else:
                self._object(bucket, key, body)
        except S3Failure as e:
            self._error(e, body)
        except SourceChangedError as e:
            self._error(S3Failure(409, "OperationAborted", f"{e}; list the data set again"), body)
        except DatasetError as e:
            status = 503 if e.temporary else 500
            self._error(S3Failure(status, "ServiceUnavailable" if e.temporary else "InternalError",
                                  str(e)), body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away

    def _bucket(self, bucket: str, query: dict[str, str], body: bool) -> None:
        if bucket not in self.owner.buckets():
            self.owner.locate(bucket, "")  # raises NoSuchBucket
        if "location" in query:
            self._xml(f'<LocationConstraint xmlns="{_NS}"/>', body)
        elif set(query) - {"list-type", "prefix", "delimiter", "max-keys", "continuation-token",
                           "start-after", "marker", "encoding-type", "fetch-owner", "x-id"}:
            raise S3Failure(501, "NotImplemented", f"?{'&'.join(sorted(query))} on a bucket is "
                            "not served by Alnair's read-only dataset cache")
        elif self.command == "HEAD":
            self._send(200, {"Content-Length": "0"})
        else:
            self._xml(_listing(bucket, self.owner.keys(bucket), query), body)

    def _object(self, bucket: str, key: str, body: bool) -> None:
        reader, path = self.owner.locate(bucket, key)
        listed = reader.file(path)
        size, etag = listed.size, listed.version
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   **({"ETag": f'"{etag}"'} if etag else {})}
        if_match = self.headers.get("If-Match")
        if if_match and etag and if_match.strip('"') != etag and if_match != "*":
            raise S3Failure(412, "PreconditionFailed", f"s3://{bucket}/{key} is at ETag {etag}, "
                            f"not {if_match}")
        start, end, status = 0, size, 200
        wanted = self.headers.get("Range")
        if wanted:
            start, end = _byte_range(wanted, size)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        headers["Content-Length"] = str(end - start)
        data = reader.read(path, start, end) if body else b""
        self._send(status, headers, data)

    # -- the wire ---------------------------------------------------------------------------

    def _xml(self, document: str, body: bool) -> None:
        data = ('<?xml version="1.0" encoding="UTF-8"?>\n' + document).encode()
        self._send(200, {"Content-Type": "application/xml", "Content-Length": str(len(data))},
                   data if body else b"")

    def _error(self, e: S3Failure, body: bool) -> None:
        log.info("refused %s %s: %s %s", self.command, self.path, e.code, e.message)
        doc = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{e.code}</Code>'
               f"<Message>{escape(e.message)}</Message><Resource>{escape(self.path)}</Resource>"
               "</Error>").encode()
        # HEAD answers carry no body, so the message also goes in a header clients can show.
        self._send(e.status, {"Content-Type": "application/xml", "Content-Length": str(len(doc)),
                              "x-alnair-error": quote(e.message, safe=" /:,.()'=")},
                   doc if body else b"")

    def _send(self, status: int, headers: dict[str, str], data: bytes = b"") -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if data:
            self.wfile.write(data)


def _byte_range(header: str, size: int) -> tuple[int, int]:
    """[start, end) of one ``bytes=`` range, as S3 reads it; several ranges are not served."""
    m = _RANGE.match(header.strip())
    if not m or not (m[1] or m[2]):
        raise S3Failure(400, "InvalidArgument", f"Range {header!r}: one range, bytes=a-b, a- or -n")
    if max(len(m[1]), len(m[2])) > 19:  # past 2^63: no object is that large (int() of
        # over 4,300 digits raises ValueError, which closed the connection unanswered)
        raise S3Failure(416, "InvalidRange", f"Range {header[:60]!r}… is outside the object's {size} bytes")
    if not m[1]:  # the last n bytes
        start, end = max(0, size - int(m[2])), size
    else:
        start = int(m[1])
        end = min(size, int(m[2]) + 1) if m[2] else size
    if start >= size or end <= start:
        raise S3Failure(416, "InvalidRange", f"Range {header!r} is outside the object's {size} bytes")
    return start, end


def _list_buckets(buckets: Iterable[str]) -> str:
    items = "".join(f"<Bucket><Name>{escape(b)}</Name></Bucket>" for b in buckets)
    return (f'<ListAllMyBucketsResult xmlns="{_NS}"><Owner><ID>alnair</ID></Owner>'
            f"<Buckets>{items}</Buckets></ListAllMyBucketsResult>")


def _listing(bucket: str, keys: list[tuple[str, int, str]], q: dict[str, str]) -> str:
    """ListObjectsV2 (``list-type=2``) or ListObjects over ``keys`` (sorted)."""
    v2 = q.get("list-type") == "2"
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    try:
        max_keys = max(0, min(MAX_KEYS, int(q.get("max-keys", MAX_KEYS))))
    except ValueError:
        raise S3Failure(400, "InvalidArgument", f"max-keys {q['max-keys']!r} is not a number") from None
    after = (q.get("continuation-token") or q.get("start-after", "")) if v2 else q.get("marker", "")
    contents: list[tuple[str, int, str]] = []
    prefixes: list[str] = []
    truncated, last = False, ""
    for key, size, etag in keys:
        if not key.startswith(prefix) or key <= after:
            continue
        if delimiter and delimiter in key[len(prefix):]:
            common = key[:len(prefix) + key[len(prefix):].index(delimiter) + len(delimiter)]
            if (prefixes and prefixes[-1] == common) or common <= after:
                continue
            entry: tuple[str, int, str] | str = common
        else:
            entry = (key, size, etag)
        if len(contents) + len(prefixes) == max_keys:
            truncated = True
            break
        if isinstance(entry, str):
            prefixes.append(entry)
            last = entry
        else:
            contents.append(entry)
            last = key
    # botocore asks for encoding-type=url and then url-decodes (unquote_plus) the keys, the
    # common prefixes, the delimiter, and v2's prefix or v1's markers; tokens stay as sent.
    encoded = q.get("encoding-type") == "url"

    def u(text: str) -> str:
        return escape(quote(text, safe="/") if encoded else text)

    e = escape
    items = "".join(f"<Contents><Key>{u(k)}</Key><Size>{s}</Size><ETag>&quot;{e(t)}&quot;</ETag>"
                    "<StorageClass>STANDARD</StorageClass></Contents>" for k, s, t in contents)
    common_xml = "".join(f"<CommonPrefixes><Prefix>{u(p)}</Prefix></CommonPrefixes>" for p in prefixes)
    if v2:
        paging = (f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
                  + (f"<ContinuationToken>{e(q['continuation-token'])}</ContinuationToken>"
                     if q.get("continuation-token") else "")
                  + (f"<NextContinuationToken>{e(last)}</NextContinuationToken>" if truncated else ""))
    else:
        paging = (f"<Marker>{u(after)}</Marker>"
                  + (f"<NextMarker>{u(last)}</NextMarker>" if truncated and delimiter else ""))
    return (f'<ListBucketResult xmlns="{_NS}"><Name>{e(bucket)}</Name>'
            f"<Prefix>{u(prefix) if v2 else e(prefix)}</Prefix>"
            f"{f'<Delimiter>{u(delimiter)}</Delimiter>' if delimiter else ''}"
            f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"
            f"{'<EncodingType>url</EncodingType>' if encoded else ''}"
            f"{paging}{items}{common_xml}</ListBucketResult>")

def _loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, [bracketed] or not) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", action="append", default=[],
                    help="a data set to serve (repeat); default: those the environment names "
                         "($ALNAIR_DATASET or $ALNAIR_DATASETS, as the webhook sets them)")
    ap.add_argument("--listen", default=DEFAULT_LISTEN, help="host:port (default %(default)s)")
    ap.add_argument("--allow-remote", action="store_true",
                    help="listen on an address other than loopback (requests are not authenticated)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    names = args.dataset or [n for n in os.environ.get("ALNAIR_DATASETS", "").split(",") if n] \
        or [os.environ.get("ALNAIR_DATASET", "")]
    if not any(names):
        sys.exit("name the data sets to serve: --dataset NAME, or set $ALNAIR_DATASET(S)")
    readers = [DatasetReader(n) for n in names]
    s3 = [r for r in readers if isinstance(r.source, S3Source)]
    for r in readers:
        if r not in s3:
            log.info("not serving data set %s: its source is not s3://", r.name)
            r.close()
    if not s3:
        sys.exit(f"none of the data sets {', '.join(names)} comes from s3://: nothing to serve")
    try:
        gateway = S3Gateway(s3, args.listen, allow_remote=args.allow_remote)
    except ValueError as e:
        sys.exit(str(e))
    log.info("serving %s at %s", gateway.describe(), gateway.url)
    gateway.serve()


if __name__ == "__main__":
    main()
