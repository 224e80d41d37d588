"""The one place StabScope talks to S3-compatible object storage (AWS S3, MinIO, Ceph, moto).

A location ``s3://bucket/prefix`` is an ``ObjectUrl``; ``ObjectStore(url)`` reads and writes objects
under its prefix, with keys relative to it. Endpoint, region and credentials come from the standard
AWS settings: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (a non-AWS server), ``AWS_DEFAULT_REGION``
/ ``AWS_REGION``, and boto3's credential chain (``AWS_ACCESS_KEY_ID`` ..., ``~/.aws``, instance roles).

Everything goes through boto3 (pyarrow's S3 multipart uploads fail against some servers), random-access
reads of Parquet files too: ``open_input`` is a file whose reads are ranged GETs, so ``pq.ParquetFile``
reads a footer and single row groups, and every request is counted. boto3 is imported only when an
object store is opened, so the embedded default never needs it. Every failure is one ``StabScopeError`` paragraph
naming the URL and the AWS setting to check.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from ingest.errors import StabScopeError

SCHEME: Final = "s3://"
DELETE_BATCH: Final = 1000
"""Keys one DeleteObjects request may name (the S3 limit)."""
DOWNLOAD_CHUNK: Final = 1 << 20
"""Bytes a download writes at a time."""

_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def is_object_url(location: object) -> bool:
    """True when ``location`` (a string or path-like) is an ``s3://`` URL."""
    return isinstance(location, str) and location.startswith(SCHEME)


@dataclass(frozen=True)
class ObjectUrl:
    """``s3://bucket/prefix``: the bucket and the key prefix (no leading or trailing ``/``; may be empty)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ObjectUrl:
        """The bucket and prefix of ``url``; a clear error when it is not ``s3://bucket[/prefix]``."""
        if not is_object_url(url):
            raise StabScopeError(f"{url!r} is not an object storage location: expected s3://bucket/prefix")
        parts = urlsplit(url)
        bucket = parts.netloc
        prefix = parts.path.strip("/")
        if parts.query or parts.fragment or not (3 <= len(bucket) <= 63) or not _bucket_chars(bucket):
            raise StabScopeError(
                f"{url!r} is not a valid object storage location: expected s3://bucket/prefix, with a bucket "
                "name of 3-63 lower-case letters, digits, dots and hyphens and no ?query or #fragment"
            )
        if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
            raise StabScopeError(f"{url!r}: the prefix may not hold empty, '.' or '..' parts")
        return cls(bucket, prefix)

    def key(self, *parts: str) -> str:
        """The full object key of ``parts`` (joined by ``/``) under this prefix."""
        rel = "/".join(p.strip("/") for p in parts if p.strip("/"))
        return f"{self.prefix}/{rel}" if self.prefix and rel else self.prefix or rel

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def _bucket_chars(bucket: str) -> bool:
    return all(c.islower() or c.isdigit() or c in ".-" for c in bucket) and bucket[0].isalnum()


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: ``key`` relative to the store's prefix, ``size`` in bytes, ``mtime`` in Unix seconds."""

    key: str
    size: int
    mtime: float


@dataclass
class ObjectCounters:
    """What an ``ObjectStore`` did: requests (round trips), bytes read and bytes written."""

    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "bytes_read": self.bytes_read, "bytes_written": self.bytes_written}


def endpoint_url() -> str | None:
    """The S3 endpoint the AWS settings name (``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``), or None (AWS)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _region() -> str | None:
    return os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or None


class ObjectStore:
    """Objects under ``url`` (an ``s3://bucket/prefix`` string or ``ObjectUrl``); keys are relative to
    its prefix. Thread-safe: boto3 clients are, and the counters take a lock."""

    def __init__(self, url: str | ObjectUrl) -> None:
        self.url = url if isinstance(url, ObjectUrl) else ObjectUrl.parse(url)
        self.endpoint = endpoint_url()
        self.counters = ObjectCounters()
        self._lock = threading.Lock()
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise StabScopeError(
                f"{self.url}: object storage needs boto3, which is not installed (pip install boto3)"
            ) from exc
        with _CLIENTS_LOCK:  # one client per endpoint and region: making one loads botocore's models
            where = (self.endpoint, _region())
            if where not in _CLIENTS:
                config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60)
                _CLIENTS[where] = boto3.client("s3", endpoint_url=self.endpoint, region_name=_region(), config=config)
            self._client = _CLIENTS[where]

    # ------------------------------------------------------------------ errors and counting

    def _count(self, *, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.counters.requests += 1
            self.counters.bytes_read += read
            self.counters.bytes_written += written

    @contextlib.contextmanager
    def _errors(self, what: str, key: str = "") -> Iterator[None]:
        """Turn a boto3/botocore failure of ``what`` into one paragraph naming the URL and the setting."""
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

        where = f"{self.url}/{key}" if key else str(self.url)
        endpoint = self.endpoint or "AWS S3 (no AWS_ENDPOINT_URL set)"
        try:
            yield
        except NoCredentialsError as exc:
            raise StabScopeError(
                f"cannot {what} {where}: no AWS credentials found. Set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE / ~/.aws/credentials)"
            ) from exc
        except EndpointConnectionError as exc:
            raise StabScopeError(
                f"cannot {what} {where}: the endpoint {endpoint} does not answer. Check AWS_ENDPOINT_URL "
                "(host and port of the S3 server) and that the server is running"
            ) from exc
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket",):
                hint = f"the bucket {self.url.bucket!r} does not exist at {endpoint}: create it, or check the URL"
            elif code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden"):
                hint = (
                    f"access denied ({code}): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
                    "and the bucket's policy"
                )
            elif code in ("NoSuchKey", "404", "NotFound"):  # a reader may start again on a newer state
                raise FileNotFoundError(f"cannot {what} {where}: no such object") from exc
            else:
                hint = f"the server answered {code or 'an error'}: {exc}"
            raise StabScopeError(f"cannot {what} {where}: {hint}") from exc
        except BotoCoreError as exc:
            raise StabScopeError(
                f"cannot {what} {where} at {endpoint}: {exc}. Check AWS_ENDPOINT_URL, AWS_DEFAULT_REGION "
                "and the credentials"
            ) from exc
        except FileNotFoundError:  # a missing object, said by the caller (``download``)
            raise
        except OSError as exc:  # a local file that cannot be written or read
            raise StabScopeError(
                f"cannot {what} {where} at {endpoint}: {exc}. Check AWS_ENDPOINT_URL and the credentials"
            ) from exc

    @staticmethod
    def _code(exc: Exception) -> str:
        response = getattr(exc, "response", None) or {}
        return str(response.get("Error", {}).get("Code", ""))

    def _k(self, key: str) -> str:
        return self.url.key(key)

    # ------------------------------------------------------------------ writes

    def put_file(self, local: str | os.PathLike[str], key: str) -> None:
        """Upload the file ``local`` to ``key`` (boto3's managed transfer: multipart for big files)."""
        size = Path(local).stat().st_size
        with self._errors("write", key):
            self._client.upload_file(str(local), self.url.bucket, self._k(key))
        self._count(written=size)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        """Write ``data`` to ``key``. With ``if_absent`` the write is conditional (If-None-Match: *) and
        returns False when ``key`` exists already (another writer put it first). Where the server rejects
        If-None-Match as unsupported, it falls back to a check then a put, which is not atomic: the
        per-run writer lock is then what serialises writers (one machine's)."""
        from botocore.exceptions import ClientError

        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_absent else {}
        with self._errors("write", key):
            try:
                self._client.put_object(Bucket=self.url.bucket, Key=self._k(key), Body=data, **extra)
            except ClientError as exc:
                code = self._code(exc)
                self._count()
                if if_absent and code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                    return False
                if not (if_absent and code in ("NotImplemented", "501")):
                    raise
                if self.exists(key):
                    return False
                self._client.put_object(Bucket=self.url.bucket, Key=self._k(key), Body=data)
        self._count(written=len(data))
        return True

    def delete(self, keys: Iterable[str]) -> int:
        """Delete ``keys`` (missing ones are no error); returns how many were asked for."""
        keys = list(dict.fromkeys(keys))
        for i in range(0, len(keys), DELETE_BATCH):
            batch = [{"Key": self._k(k)} for k in keys[i : i + DELETE_BATCH]]
            with self._errors("delete objects under"):
                self._client.delete_objects(Bucket=self.url.bucket, Delete={"Objects": batch, "Quiet": True})
            self._count()
        return len(keys)

    # ------------------------------------------------------------------ reads

    def get_bytes(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """The bytes [start, end) of ``key`` (to its end when ``end`` is None)."""
        extra: dict[str, Any] = {}
        if start or end is not None:
            extra["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        with self._errors("read", key):
            body = self._client.get_object(Bucket=self.url.bucket, Key=self._k(key), **extra)["Body"].read()
        self._count(read=len(body))
        return bytes(body)

    def download(self, key: str, local_path: str | os.PathLike[str]) -> int:
        """Copy ``key`` to ``local_path`` (written under a temporary name, then renamed: a reader never
        sees half a file); returns its size in bytes. A missing object is ``FileNotFoundError``."""
        target = Path(local_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with self._errors("download", key):
                # one GET streamed to disk: fewer round trips than the managed transfer's HEAD + GETs
                body = self._client.get_object(Bucket=self.url.bucket, Key=self._k(key))["Body"]
                with tmp.open("wb") as out:
                    for chunk in body.iter_chunks(DOWNLOAD_CHUNK):
                        out.write(chunk)
            size = tmp.stat().st_size
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        self._count(read=size)
        return size

    def open_input(self, key: str, size: int | None = None) -> RangeFile:
        """A random-access file over ``key`` (its ``size`` in bytes, when known, saves a request): each
        read is one ranged GET, counted here; ``pq.ParquetFile`` on it reads the footer, then only the
        row groups asked for."""
        return RangeFile(self, key, self.size(key) if size is None else size)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key (relative) starts with ``prefix``, by key."""
        found: list[ObjectInfo] = []
        base = self._k("")
        full = self._k(prefix) + ("/" if prefix.endswith("/") else "")
        strip = len(base) + 1 if base else 0
        paginator = self._client.get_paginator("list_objects_v2")
        with self._errors("list", prefix):
            for page in paginator.paginate(Bucket=self.url.bucket, Prefix=full):
                self._count()
                for item in page.get("Contents", []):
                    found.append(ObjectInfo(item["Key"][strip:], int(item["Size"]), item["LastModified"].timestamp()))
        return found

    def list_folders(self, prefix: str) -> builtins.list[str]:
        """The names of the "folders" right under ``prefix`` (keys up to the next ``/``), one request per 1,000."""
        full = self._k(prefix).rstrip("/") + "/"
        names: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        with self._errors("list", prefix):
            for page in paginator.paginate(Bucket=self.url.bucket, Prefix=full, Delimiter="/"):
                self._count()
                names.extend(p["Prefix"][len(full) :].rstrip("/") for p in page.get("CommonPrefixes", []))
        return names

    def head(self, key: str) -> ObjectInfo | None:
        """``key``'s size and time, or None when there is no such object."""
        from botocore.exceptions import ClientError

        with self._errors("look up", key):
            try:
                meta = self._client.head_object(Bucket=self.url.bucket, Key=self._k(key))
            except ClientError as exc:
                if self._code(exc) in ("404", "NoSuchKey", "NotFound"):
                    self._count()
                    return None
                raise
        self._count()
        return ObjectInfo(key, int(meta["ContentLength"]), meta["LastModified"].timestamp())

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def size(self, key: str) -> int:
        """``key``'s size in bytes; a clear error when there is no such object."""
        info = self.head(key)
        if info is None:
            raise StabScopeError(f"cannot read {self.url}/{key}: no such object")
        return info.size

    def check_bucket(self) -> None:
        """One request that fails clearly when the bucket is missing, the endpoint unreachable or the
        credentials refused (a store checks this when it opens)."""
        from botocore.exceptions import ClientError

        with self._errors("open"):
            try:
                self._client.head_bucket(Bucket=self.url.bucket)
            except ClientError as exc:
                if self._code(exc) in ("404", "NoSuchBucket", "NotFound"):
                    exc.response["Error"]["Code"] = "NoSuchBucket"
                raise
        self._count()


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over one object of ``store``, read by ranged GETs (``open_input``)."""

    def __init__(self, store: ObjectStore, key: str, size: int) -> None:
        super().__init__()
        self._store, self._key, self._size, self._pos = store, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + len(view))
        if end <= self._pos:
            return 0
        data = self._store.get_bytes(self._key, self._pos, end)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)
