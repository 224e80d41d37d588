"""ingest.store.object_store against a real moto server on 127.0.0.1: round trips, ranges, the conditional
put, listing, delete, the counters and the clear errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import StabScopeError
from ingest.store.object_store import ObjectStore, ObjectUrl, is_object_url
from tests.s3_server import S3Server, free_port


def test_urls_parse_and_print() -> None:
    url = ObjectUrl.parse("s3://my-bucket/a/b/")
    assert (url.bucket, url.prefix, str(url)) == ("my-bucket", "a/b", "s3://my-bucket/a/b")
    assert url.key("runs", "run=x/m.json") == "a/b/runs/run=x/m.json"
    assert ObjectUrl.parse("s3://bkt").key("k") == "k"
    assert is_object_url("s3://bkt/x") and not is_object_url("/tmp/store") and not is_object_url(Path("s3:"))
    for bad in ("s3://ab/x", "s3://Upper/x", "s3://bkt/a//b", "s3://bkt/a/../b", "/local/path"):
        with pytest.raises(StabScopeError, match=r"s3://bucket/prefix|prefix may not"):
            ObjectUrl.parse(bad)


def test_round_trips_ranges_and_listing(s3_url: str, tmp_path: Path) -> None:
    store = ObjectStore(s3_url)
    data = bytes(range(256)) * 40
    assert store.put_bytes("a/one.bin", data)
    assert store.get_bytes("a/one.bin") == data
    assert store.get_bytes("a/one.bin", 10, 20) == data[10:20]
    assert store.get_bytes("a/one.bin", len(data) - 5) == data[-5:]
    local = tmp_path / "f.bin"
    local.write_bytes(data[:1000])
    store.put_file(local, "a/two.bin")
    assert store.download("a/two.bin", tmp_path / "out" / "two.bin") == 1000
    assert (tmp_path / "out" / "two.bin").read_bytes() == data[:1000]
    assert not list((tmp_path / "out").glob("*.tmp"))
    store.put_bytes("b/three.bin", b"xyz")
    listed = store.list("a/")
    assert [(o.key, o.size) for o in listed] == [("a/one.bin", len(data)), ("a/two.bin", 1000)]
    assert [o.key for o in store.list("")] == ["a/one.bin", "a/two.bin", "b/three.bin"]
    assert store.list_folders("") == ["a", "b"]
    assert store.exists("b/three.bin") and not store.exists("b/none.bin")
    assert store.size("a/two.bin") == 1000
    assert store.delete(["a/one.bin", "b/three.bin", "b/never-there.bin"]) == 3
    assert [o.key for o in store.list("")] == ["a/two.bin"]


def test_conditional_put_loses_on_second_write(s3_url: str) -> None:
    store = ObjectStore(s3_url)
    assert store.put_bytes("m/m000000001.json", b"first", if_absent=True)
    assert not store.put_bytes("m/m000000001.json", b"second", if_absent=True)
    assert store.get_bytes("m/m000000001.json") == b"first"
    assert store.put_bytes("m/m000000001.json", b"third")  # unconditional: replaces
    assert store.get_bytes("m/m000000001.json") == b"third"


def test_parquet_reads_by_range(s3_url: str, tmp_path: Path) -> None:
    table = pa.table({"x": list(range(100_000))})
    local = tmp_path / "t.parquet"
    pq.write_table(table, local, row_group_size=10_000)
    store = ObjectStore(s3_url)
    store.put_file(local, "t.parquet")
    with store.open_input("t.parquet") as f:
        file = pq.ParquetFile(f)
        assert file.metadata.num_row_groups == 10
        assert file.read_row_group(3).column("x").to_pylist() == list(range(30_000, 40_000))


def test_counters_count_requests_and_bytes(s3_url: str) -> None:
    store = ObjectStore(s3_url)
    store.put_bytes("k", b"12345")
    store.get_bytes("k", 1, 3)
    store.list("")
    assert store.counters.as_dict() == {"requests": 3, "bytes_read": 2, "bytes_written": 5}


def test_missing_bucket_and_wrong_port_are_one_paragraph(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StabScopeError, match=r"s3://no-such-bucket-x/store.*bucket 'no-such-bucket-x' does not exist"):
        ObjectStore("s3://no-such-bucket-x/store").check_bucket()
    with pytest.raises(StabScopeError, match="does not exist"):
        ObjectStore("s3://no-such-bucket-x/store").get_bytes("k")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(StabScopeError, match=r"does not answer\. Check AWS_ENDPOINT_URL"):
        ObjectStore("s3://any-bucket/store").check_bucket()


def test_a_missing_object_is_file_not_found(s3_url: str, tmp_path: Path) -> None:
    """A reader whose object a newer state replaced starts again on that state: it must tell that case."""
    store = ObjectStore(s3_url)
    with pytest.raises(FileNotFoundError, match=r"/store/gone\.bin: no such object"):
        store.get_bytes("gone.bin")
    with pytest.raises(FileNotFoundError, match="no such object"):
        store.download("gone.bin", tmp_path / "x")
    with pytest.raises(StabScopeError, match="no such object"):
        store.size("gone.bin")
    assert not (tmp_path / "x").exists()
