"""An 8x B200 node looks big enough and dies at ~94% of weight loading: check and up refuse it
with the arithmetic, before a byte is downloaded."""

import pytest
from tbfixture import testbed

from k3run import changing_calls, k3, out

pytestmark = pytest.mark.integration


def test_eight_b200_is_refused_before_anything_is_downloaded(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b200", engine="vllm") as tb:
        check = k3("check", "-i", str(tb.inventory), env={"COLUMNS": "400"})
        assert check.returncode == 1, out(check)
        text = " ".join(out(check).split())
        assert "sizing" in text and "1,536 GB < 1,560.94 GB checkpoint, short by ~25 GB" in text
        up = k3("up", "-i", str(tb.inventory), env={"COLUMNS": "400"})
        assert up.returncode == 1 and "short by ~25 GB" in " ".join(out(up).split())
        assert "nothing was changed" in out(up)
        assert tb.stats()["hub"]["by_node"].get("node0", {}).get("bytes", 0) == 0
        assert changing_calls(tb.stats()) == []
