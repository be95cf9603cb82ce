"""docs/benchmarks.md is generated (scripts/benchdoc.py) from the runs scripts/bench --save
keeps under docs/bench/: a fixture run becomes the expected tables, and the page in the repo
is exactly what the generator makes of docs/bench/ today, so the two cannot drift."""

from pathlib import Path

import benchdoc

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "bench"


def test_a_saved_run_becomes_its_provenance_and_a_table_of_its_figures():
    page = benchdoc.render(benchdoc.load(FIXTURES))
    assert page.startswith(benchdoc.HEADER)
    assert page[len(benchdoc.HEADER):] == EXPECTED


PROVENANCE = (
    "| guard-20260101T000000Z.json | 20260101T000000Z | `scripts/bench --guard 4` "
    "| 0123456789ab (uncommitted changes) | 2 cores, Test CPU, kernel 6.1 "
    "| 0.1, 0.2, 0.3 / 1.5, 0.5, 0.4 | quiet |\n")
EXPECTED = """
## guard

| run | started (UTC) | command | commit | machine | load 1/5/15 min at start / end | note |
|---|---|---|---|---|---|---|
""" + PROVENANCE + """
| figure | guard-20260101T000000Z.json#1 | guard-20260101T000000Z.json#2 |
|---|---|---|
| nodes | 4 | 8 |
| engine_kill_s | 1.65 | 1.62 |
| node_kill_s | 20.83 |  |
| ranks | 1, 2 |  |
| wedge.head_s |  | 29.9 |
| error |  | - |
"""


def test_docs_benchmarks_md_is_what_the_generator_makes_of_docs_bench():
    assert list((REPO / "docs" / "bench").glob("*.json")), "no saved bench run under docs/bench/"
    page = benchdoc.render(benchdoc.load(REPO / "docs" / "bench"))
    assert (REPO / "docs" / "benchmarks.md").read_text() == page, "run scripts/benchdoc"


def test_a_list_of_documents_is_a_row_per_leaf_by_place():
    flat = benchdoc.flatten({"k3deploy": [{"seconds": 61.1, "download": {"connections": 64}},
                                          {"seconds": 96.7}], "ranks": [1, 2]})
    assert flat == {"k3deploy.0.seconds": "61.1", "k3deploy.0.download.connections": "64",
                    "k3deploy.1.seconds": "96.7", "ranks": "1, 2"}


def test_documents_with_the_same_labels_are_a_table_a_row_each_when_they_outnumber_figures():
    runs = [{"path": "hub-tls", "client": "k3deploy", "MBps": 334},
            {"path": "hub-tls", "client": "aria2c", "MBps": 155},
            {"path": "peer", "client": "k3deploy", "MBps": 932, "rss": 165},
            {"path": "peer", "client": "aria2c", "MBps": 500},
            {"scaling": "2 over 1", "peer": 0.88}]
    page = benchdoc.figures([{"file": "t.json", "runs": runs}])
    assert page == ("| run | client | path | MBps | rss |\n|---|---|---|---|---|\n"
                    "| t.json#1 | k3deploy | hub-tls | 334 |  |\n"
                    "| t.json#2 | aria2c | hub-tls | 155 |  |\n"
                    "| t.json#3 | k3deploy | peer | 932 | 165 |\n"
                    "| t.json#4 | aria2c | peer | 500 |  |\n"
                    "\n| figure | t.json#5 |\n|---|---|\n| scaling | 2 over 1 |\n| peer | 0.88 |\n")


def _paragraphs(text: str) -> list[str]:
    return [p for p in text.split("\n\n") if p.strip()]


def test_every_comparison_with_hf_download_says_xet_was_off():
    """Issue 53: the mock Hub speaks no Xet, so every `hf download` figure ran with
    HF_HUB_DISABLE_XET=1; a paragraph of the README or docs/ that names it says so (the generated
    page says it once per section, above the section's tables)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    unsaid = []
    for page in pages:
        text = page.read_text()
        if page.name == "benchmarks.md":
            for section in text.split("\n## ")[1:]:
                if "hf_download" in section or "hf download" in section:
                    assert "Xet off" in section.split("\n|", 1)[0], section[:200]
            continue
        unsaid += [f"{page.name}: {p[:120]}" for p in _paragraphs(text)
                   if "hf download" in p and any(c.isdigit() for c in p) and "Xet" not in p]
    assert not unsaid, unsaid


def test_the_hub_cdn_section_says_its_settings_before_its_figures():
    page = benchdoc.render([{"bench": "hub-cdn", "file": "hub-cdn-x.json", "runs": [{"hf_download": {"seconds": 1}}]}])
    section = page.split("## hub-cdn\n\n", 1)[1]
    assert section.startswith(benchdoc.SETTINGS["hub-cdn"])
    assert section.index("HF_HUB_DISABLE_XET=1") < section.index("| run |")
