"""The Hub's bad minutes in the middle of a download, on a testbed with the mock CDN: the same
`k3deploy run` completes. The retry budget is set short (download.retry_minutes: 3 s) against
an outage of 9 s, so the downloader itself gives up mid-outage (a transient failure) and the
laptop must start it again, as it would after `hub-outage 300` with the default 15 minutes.
The CDN answers over TLS with a first-byte wait, as the real bridge: the node's downloader
trusts it through the node's system trust store, where the testbed put its certificate."""
from __future__ import annotations

import time
from pathlib import Path

from k3run import k3_bg, state
from polling import wait_until
from tbfixture import testbed

OUTAGE = 9


def test_the_same_run_outlives_a_hub_outage_by_restarting_the_downloader(tmp_path):
    with testbed(tmp_path, nodes=1, hub_cdn=True, hub_cdn_tls=True, hub_first_byte_ms=17, hub_rate=0,
                 hub_node_rate=2_500_000) as tb:
        assert (tb.dir / "hub" / "cdn").read_text().startswith("https://")
        with open(tb.inventory, "a") as fh:
            fh.write("download: {retry_minutes: 0.05}\n")
        run = k3_bg("run", "resume-download", "-i", str(tb.inventory))
        try:
            wait_until(lambda: tb.stats()["cdn"]["bytes"] > 4_000_000, 60, "4 MB from the CDN")
            tb.fault("hub-outage", OUTAGE)
            began = time.monotonic()
            output = run.communicate(timeout=120)[0]
        finally:
            run.kill()
        assert run.returncode == 0, output
        assert time.monotonic() - began >= OUTAGE - 1  # it did not finish before the outage ended
        log = tb.ssh(tb.nodes[0], "cat /mnt/nvme/.k3deploy/download.log").stdout
        starts = log.count("ranged HTTP via huggingface_hub")
        assert starts >= 2 and "retry budget" in log, log[-3000:]
        assert state(Path(tb.inventory), tb.nodes[0])["steps"]["download"]["status"] == "changed"
        assert tb.stats()["cdn"]["authorized_requests"] == 0
