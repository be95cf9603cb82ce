"""The mock Hub as the real one answers in 2026: /resolve of LFS files redirects to a CDN with a
signed URL, connection speeds drawn per connection, the gate on /resolve only, outages, rate
limits and a forbidding CDN. Driven by the real huggingface_hub client where it can be."""
from __future__ import annotations

import contextlib
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from tb import hub as tbhub  # noqa: E402
from tb import hubcdn, hubtls  # noqa: E402

GRANTED = "hf_granted"


@pytest.fixture
def cdn_hub(tmp_path):
    with tbhub.serve_in_thread(tmp_path / "hub", shards=3, shard_bytes=40_000, cdn_listen="127.0.0.1:0",
                               tokens=frozenset([GRANTED]), gated=True) as handle:
        yield handle


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def request(url: str, headers: dict | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}, method=method), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def resolve_url(hub, path: str, rev: str = "main") -> str:
    return f"{hub.url}/{hub.repo.repo_id}/resolve/{rev}/{path}"


def signed_location(hub, path: str) -> str:
    status, headers, _ = request(resolve_url(hub, path), {"Authorization": f"Bearer {GRANTED}"}, "HEAD")
    assert status == 302, headers
    return headers["Location"]


def test_real_client_downloads_through_the_cdn_without_sending_it_the_token(cdn_hub, hf, tmp_path):
    path = hf.snapshot_download(cdn_hub.repo.repo_id, cache_dir=tmp_path / "c", endpoint=cdn_hub.url,
                                token=GRANTED)
    for f in cdn_hub.repo.files:
        assert (Path(path) / f.path).read_bytes() == cdn_hub.repo.local_path(f.path).read_bytes()
    stats = cdn_hub.stats()
    lfs = [f for f in cdn_hub.repo.files if f.is_lfs]
    cdn, hub = stats["cdn"], stats["by_node"]["127.0.0.1"]
    assert cdn["bytes"] == sum(f.size for f in lfs) and cdn["requests"] == len(lfs)
    assert cdn["authorized_requests"] == 0
    assert hub["bytes"] == sum(f.size for f in cdn_hub.repo.files if not f.is_lfs)
    assert hub["authorized_requests"] == hub["requests"]  # the Hub itself got the token every time


def test_the_302_carries_the_file_metadata_and_a_signed_cdn_url(cdn_hub, hf):
    shard = cdn_hub.repo.file(cdn_hub.repo.shard_names()[0])
    status, headers, body = request(resolve_url(cdn_hub, shard.path), {"Authorization": f"Bearer {GRANTED}"})
    assert status == 302 and body == f"Found. Redirecting to {headers['Location']}".encode()
    assert headers["X-Repo-Commit"] == cdn_hub.repo.sha
    assert headers["X-Linked-Etag"] == f'"{shard.sha256}"' and headers["X-Linked-Size"] == str(shard.size)
    location = urlsplit(headers["Location"])
    assert f"{location.scheme}://{location.netloc}" == cdn_hub.cdn_url != cdn_hub.url
    assert "X-Amz-Expires=3600" in location.query and "X-Amz-Signature=" in location.query
    meta = hf.get_hf_file_metadata(resolve_url(cdn_hub, shard.path), token=GRANTED)
    assert (meta.etag, meta.size, meta.commit_hash) == (shard.sha256, shard.size, cdn_hub.repo.sha)
    assert meta.location.startswith(cdn_hub.cdn_url)
    small = cdn_hub.repo.file("config.json")
    status, headers, body = request(resolve_url(cdn_hub, small.path), {"Authorization": f"Bearer {GRANTED}"})
    assert status == 200 and body == cdn_hub.repo.local_path(small.path).read_bytes()


def test_cdn_ranges_expiry_and_bad_signatures(tmp_path):
    # 4 s: with 1 s a loaded CI machine took longer than that between the resolve and the
    # range request, and the URL had expired (403) before its first use
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=30_000, cdn_listen="127.0.0.1:0",
                               url_ttl=4) as hub:
        shard = hub.repo.file(hub.repo.shard_names()[0])
        body = hub.repo.local_path(shard.path).read_bytes()
        url = signed_location(hub, shard.path)
        status, headers, data = request(url, {"Range": "bytes=100-199"})
        assert (status, data, headers["Content-Range"]) == (206, body[100:200], f"bytes 100-199/{shard.size}")
        status, _, data = request(url.replace("X-Amz-Signature=", "X-Amz-Signature=0"))
        assert status == 403 and b"<Code>AccessDenied</Code>" in data
        time.sleep(5.1)
        status, _, data = request(url)
        assert status == 403 and b"Request has expired" in data
        status, _, data = request(signed_location(hub, shard.path))  # a fresh /resolve: a fresh URL
        assert (status, data) == (200, body)
        request(signed_location(hub, shard.path), {"Authorization": "Bearer leaked"}, "HEAD")
        assert hub.stats()["cdn"]["authorized_requests"] == 1  # what the count is there to catch


def test_connection_speeds_are_drawn_per_connection_from_a_seed(tmp_path):
    draws = [hubcdn.ConnLottery((1, 8, 0.7), 0, seed=7).draw for _ in range(2)]
    first, second = ([d() for _ in range(400)] for d in draws)
    assert first == second
    assert 0.6 < sum(slow for _, slow in first) / 400 < 0.8
    assert {rate for rate, _ in first} == {1, 8}
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=60_000, cdn_listen="127.0.0.1:0",
                               conn_rates=(100_000, 50_000_000, 1.0)) as hub:
        url = signed_location(hub, hub.repo.shard_names()[0])
        began = time.monotonic()
        status, _, data = request(url)
        assert status == 200 and len(data) == 60_000
        assert time.monotonic() - began >= 0.5  # 60 kB at the slow 100 kB/s
        cdn = hub.stats()["cdn"]
        assert (cdn["connections"], cdn["slow_connections"]) == (1, 1)


def test_the_gate_refuses_only_resolve(cdn_hub, hf, tmp_path):
    from huggingface_hub import errors
    repo = cdn_hub.repo.repo_id
    api = hf.HfApi(endpoint=cdn_hub.url, token=False)
    assert api.model_info(repo).gated == "manual"
    assert len(list(api.list_repo_tree(repo, recursive=True))) == len(cdn_hub.repo.files)
    with pytest.raises(errors.GatedRepoError, match="You must have access to it and be authenticated"):
        hf.hf_hub_download(repo, "config.json", endpoint=cdn_hub.url, token=False, cache_dir=tmp_path / "a")
    with pytest.raises(errors.GatedRepoError, match="you are not in the authorized list"):
        hf.hf_hub_download(repo, "config.json", endpoint=cdn_hub.url, token="hf_other", cache_dir=tmp_path / "b")
    status, headers, _ = request(resolve_url(cdn_hub, "config.json"), {"Authorization": "Bearer hf_other"}, "HEAD")
    assert (status, headers["X-Error-Code"]) == (403, "GatedRepo")


def test_outage_answers_every_hub_and_cdn_request_then_ends(cdn_hub):
    url = signed_location(cdn_hub, cdn_hub.repo.shard_names()[0])
    tbhub.write_fault(cdn_hub.dir, "outage", 1.0, 502)
    assert request(f"{cdn_hub.url}/api/models/{cdn_hub.repo.repo_id}")[0] == 502
    assert request(url)[0] == 502
    time.sleep(1.1)
    assert request(f"{cdn_hub.url}/api/models/{cdn_hub.repo.repo_id}")[0] == 200
    assert request(url)[0] == 200


def test_rate_limit_answers_429_with_the_headers_the_client_parses(cdn_hub):
    from huggingface_hub.utils import parse_ratelimit_headers
    tbhub.write_fault(cdn_hub.dir, "rate-limit", 2, 300)
    auth = {"Authorization": f"Bearer {GRANTED}"}
    answers = [request(resolve_url(cdn_hub, "config.json"), auth, "HEAD") for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 429]
    assert parse_ratelimit_headers(answers[0][1]).remaining == 1
    info = parse_ratelimit_headers(answers[2][1])
    assert (info.resource_type, info.remaining, info.limit, info.window_seconds) == ("resolvers", 0, 2, 300)
    assert 295 <= info.reset_in_seconds <= 300
    assert request(f"{cdn_hub.url}/api/models/{cdn_hub.repo.repo_id}")[0] == 200  # the API is not a resolver
    # counted per token (per address without one), as the real Hub counts per user or per IP
    assert request(resolve_url(cdn_hub, "config.json"), method="HEAD")[0] == 401
    assert request(resolve_url(cdn_hub, "config.json"), auth, "HEAD")[0] == 429


def test_cdn_forbid_refuses_the_next_n_cdn_requests(cdn_hub):
    url = signed_location(cdn_hub, cdn_hub.repo.shard_names()[0])
    tbhub.write_fault(cdn_hub.dir, "cdn-forbid", 2)
    assert [request(url)[0] for _ in range(3)] == [403, 403, 200]
    tbhub.write_fault(cdn_hub.dir, "cdn-forbid", 1)  # a new fault: counted afresh
    assert [request(url)[0] for _ in range(2)] == [403, 200]


def test_the_real_client_waits_the_t_the_429_gave(tmp_path):
    from huggingface_hub.utils import http_backoff
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=1000) as hub:
        tbhub.write_fault(hub.dir, "rate-limit", 1, 2)
        url = resolve_url(hub, "config.json")
        assert request(url, method="HEAD")[0] == 200
        began = time.monotonic()
        status, headers, _ = request(url, method="HEAD")
        t = int(headers["RateLimit"].rsplit("t=", 1)[1])
        assert status == 429 and 1 <= t <= 2
        assert http_backoff("HEAD", url, base_wait_time=0.01).status_code == 200
        assert time.monotonic() - began >= t  # huggingface_hub sleeps t + 1 before its retry


def test_the_node_link_is_shared_by_hub_and_cdn(tmp_path):
    """--node-rate is the node's whole Internet link: a CDN body and a Hub body at once share it."""
    import threading
    with tbhub.serve_in_thread(tmp_path / "hub", shards=1, shard_bytes=100_000, cdn_listen="127.0.0.1:0",
                               node_rate=200_000) as hub:
        cdn_url = signed_location(hub, hub.repo.shard_names()[0])
        readme = resolve_url(hub, "tiktoken.model")
        size = hub.repo.file("tiktoken.model").size
        began = time.monotonic()
        threads = [threading.Thread(target=request, args=(u,)) for u in (cdn_url, readme)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert time.monotonic() - began >= (100_000 + size) / 200_000 * 0.9
        stats = hub.stats()
        assert stats["cdn"]["bytes"] == 100_000 and stats["by_node"]["127.0.0.1"]["bytes"] == size


def test_tls_cdn_waits_its_first_byte_and_serves_the_range_to_a_client_that_trusts_it(tmp_path):
    cert, key = tmp_path / "cdn.pem", tmp_path / "cdn-key.pem"
    hubtls.self_signed("127.0.0.1", cert, key)
    with tbhub.serve_in_thread(tmp_path / "hub", shards=2, shard_bytes=300_000, cdn_listen="127.0.0.1:0",
                               cdn_cert=str(cert), cdn_key=str(key), first_byte=0.3) as hub:
        shard = hub.repo.shard_names()[0]
        location = signed_location(hub, shard)
        assert location.startswith("https://127.0.0.1:") and location.startswith(hub.cdn_url)
        trusted = ssl.create_default_context(cafile=str(cert))
        began = time.monotonic()
        with urllib.request.urlopen(urllib.request.Request(location, headers={"Range": "bytes=100-199"}),
                                    context=trusted, timeout=10) as answer:
            waited, body = time.monotonic() - began, answer.read()
            assert answer.status == 206
        assert body == hub.repo.local_path(shard).read_bytes()[100:200]
        assert waited >= 0.3
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(location, context=ssl.create_default_context(), timeout=10)


def test_a_shared_link_paces_each_body_by_its_share_within_a_read_timeout():
    """96 bodies on a 600 kB/s node link (test_dry_fire's): each gets a write far more often
    than huggingface_hub's 10 s read timeout (HF_HUB_DOWNLOAD_TIMEOUT), as TCP shares a link
    among its flows; alone on it, a body gets the whole link's tenth-of-a-second writes."""
    from tb import hubbody
    link = tbhub.NodeLink(600_000)
    with contextlib.ExitStack() as bodies:
        for _ in range(96):
            bodies.enter_context(link.sending())
        chunk = hubbody._chunk(8 * 1024 * 1024, link)
        assert chunk == 4096 and 96 * chunk / link.rate < 1.0
    with link.sending():
        assert hubbody._chunk(8 * 1024 * 1024, link) == 60_000
