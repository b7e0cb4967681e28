"""data_prep.download against a local HTTP server (Range support, cut connections): no real network."""
from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import threading
import zipfile

import pytest

from data_prep import download
from mlperf_keras.inputs.manifest import DataError
from tests.conftest import run_cli


class _Server:
    """Serves files from a dict; can honour or ignore Range, and cut the next response after some bytes."""

    def __init__(self):
        self.files, self.requests = {}, []
        self.honour_range, self.cut_next_after = True, None
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match and server.honour_range:
                    start = int(match.group(1))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if server.cut_next_after is not None:   # announce everything, send a part, close the connection
                    body, server.cut_next_after = body[:server.cut_next_after], None
                    self.close_connection = True
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _payload(n=300_000, seed=1):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8).tobytes()


def _md5(data):
    return hashlib.md5(data).hexdigest()


def test_a_verified_download_lands_atomically_with_its_sha256_recorded(server, tmp_path):
    data = _payload()
    server.files["/ml-20m.zip"] = data
    lines = []
    digest = download.fetch(download.Source(server.url("/ml-20m.zip"), md5=_md5(data)), str(tmp_path), lines.append)
    assert (tmp_path / "ml-20m.zip").read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "SHA256SUMS").read_text() == f"{digest}  ml-20m.zip\n"   # the `sha256sum -c` format
    assert not (tmp_path / "ml-20m.zip.part").exists()
    assert "md5 verified" in lines[-1]
    again = []   # a second run keeps the file and re-verifies it, without downloading
    download.fetch(download.Source(server.url("/ml-20m.zip"), md5=_md5(data)), str(tmp_path), again.append)
    assert len(server.requests) == 1 and again == [f"ml-20m.zip: already in {tmp_path}, md5 verified"]


def test_a_checksum_mismatch_is_an_error_and_leaves_no_file(server, tmp_path):
    server.files["/ml-20m.zip"] = _payload()
    with pytest.raises(DataError, match=r"ml-20m.zip: md5 [0-9a-f]{32}, but the publisher's is 0{32}; the download "
                                        r"was deleted"):
        download.fetch(download.Source(server.url("/ml-20m.zip"), md5="0" * 32), str(tmp_path), lambda _: None)
    assert sorted(os.listdir(tmp_path)) == []


def test_a_cut_download_resumes_where_it_stopped(server, tmp_path):
    data = _payload()
    server.files["/train2017.zip"] = data
    source = download.Source(server.url("/train2017.zip"), md5=_md5(data))
    server.cut_next_after = 123_457
    with pytest.raises(DataError, match=r"connection .* run again to resume"):
        download.fetch(source, str(tmp_path), lambda _: None)
    assert not (tmp_path / "train2017.zip").exists()
    assert (tmp_path / "train2017.zip.part").read_bytes() == data[:123_457]
    lines = []
    download.fetch(source, str(tmp_path), lines.append)
    assert server.requests[-1] == ("/train2017.zip", "bytes=123457-")   # asked only for the rest
    assert (tmp_path / "train2017.zip").read_bytes() == data           # and the md5 covers the whole file
    assert any("resuming at" in line for line in lines), lines


def test_a_server_that_ignores_range_restarts_the_file(server, tmp_path):
    data = _payload()
    server.files["/dev.tgz"] = data
    (tmp_path / "dev.tgz.part").write_bytes(data[:1000])
    server.honour_range = False
    lines = []
    download.fetch(download.Source(server.url("/dev.tgz"), md5=_md5(data)), str(tmp_path), lines.append)
    assert (tmp_path / "dev.tgz").read_bytes() == data
    assert any("does not resume" in line for line in lines)


def test_a_complete_part_file_is_finished_without_downloading_again(server, tmp_path):
    data = _payload(5000)
    server.files["/dev.tgz"] = data
    (tmp_path / "dev.tgz.part").write_bytes(data)      # e.g. killed between the last byte and the rename
    download.fetch(download.Source(server.url("/dev.tgz"), md5=_md5(data)), str(tmp_path), lambda _: None)
    assert (tmp_path / "dev.tgz").read_bytes() == data and server.requests[-1][1] == "bytes=5000-"


def test_progress_lines_say_how_far_how_fast_and_how_long(server, tmp_path):
    server.files["/val2017.zip"] = _payload(3 << 20)
    lines = []
    download.fetch(download.Source(server.url("/val2017.zip")), str(tmp_path), lines.append, progress_seconds=0)
    progress = [line for line in lines if "%" in line]
    assert len(progress) >= 2, lines
    assert re.fullmatch(r"  val2017.zip: [\d.]+ MiB / 3.0 MiB \([\d.]+%\), [\d.]+ [KMG]?i?B/s, ETA \d+:\d\d:\d\d",
                        progress[0]), progress[0]
    assert "no published checksum" in lines[-1]


def test_http_errors_are_one_line(server, tmp_path):
    with pytest.raises(DataError, match=r"^http://127.0.0.1:\d+/missing.tgz: HTTP 404 Not Found$"):
        download.fetch(download.Source(server.url("/missing.tgz")), str(tmp_path), lambda _: None)


def test_coco_style_zips_are_extracted_into_raw_dir(server, tmp_path, monkeypatch):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("annotations/instances_val2017.json", "{}")
        archive.writestr("annotations/instances_train2017.json", "{}")
    server.files["/annotations_trainval2017.zip"] = buffer.getvalue()
    monkeypatch.setitem(download.DATASETS, "coco2017",
                        [download.Source(server.url("/annotations_trainval2017.zip"), extract=True)])
    lines = []
    assert download.download("coco2017", str(tmp_path), lines.append)
    assert (tmp_path / "annotations" / "instances_val2017.json").read_text() == "{}"
    assert [name for name in os.listdir(tmp_path) if name.startswith(".extract")] == []
    assert "python -m data_prep.coco --raw_dir=" in lines[-1]


def test_imagenet_explains_the_login_and_checks_files_already_there(tmp_path):
    lines = []
    assert not download.download("imagenet", str(tmp_path), lines.append)
    text = "\n".join(lines)
    for name in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar", "ILSVRC2012_devkit_t12.tar.gz",
                 "https://image-net.org/download.php", str(tmp_path)):
        assert name in text
    (tmp_path / "ILSVRC2012_devkit_t12.tar.gz").write_bytes(b"not the devkit")
    with pytest.raises(DataError, match="ILSVRC2012_devkit_t12.tar.gz: md5 .*, expected fa75699e"):
        download.download("imagenet", str(tmp_path), lambda _: None)


def test_help_shows_the_modules_own_flags():
    proc = run_cli("data_prep.download", "--help", timeout=120)
    for flag in ("--dataset", "--raw_dir", "--progress_seconds", "movielens|coco2017|wmt17|wmt16|imagenet"):
        assert flag in proc.stdout, proc.stdout


def test_published_checksums_are_the_ones_the_help_cites():
    (movielens,) = download.DATASETS["movielens"]
    assert movielens.name == "ml-20m.zip" and movielens.md5 == "cd245b17a1ae2cc31bb14903e1204af3"
    assert all(source.md5 is None for name in ("coco2017", "wmt17", "wmt16") for source in download.DATASETS[name])
    assert {s.name for s in download.DATASETS["wmt17"]} == {
        "training-parallel-nc-v12.tgz", "training-parallel-commoncrawl.tgz", "training-parallel-europarl-v7.tgz",
        "dev.tgz"}
