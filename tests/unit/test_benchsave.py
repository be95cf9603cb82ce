"""scripts/bench --save keeps what a bench printed with where it ran: the JSON lines only (a
bench's other output is not a figure), the bench its flags select, the commit it started at."""

import json
import subprocess

import benchsave


def test_a_saved_run_holds_the_printed_documents_and_its_provenance(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    started = benchsave.start(repo)
    printed = '{"nodes": 4, "ratio": 0.28}\nbench: a progress line\n{"nodes": 8, "ratio": 0.2}\n{broken\n'
    path = benchsave.save(tmp_path / "out", repo, ["--fanout", "--fanout-nodes", "4", "8"],
                          "quiet", started, printed)
    doc = json.loads(path.read_text())
    assert path.name.startswith("fanout-") and doc["bench"] == "fanout"
    assert doc["command"] == "scripts/bench --fanout --fanout-nodes 4 8"
    assert (doc["commit"], doc["dirty"]) == (sha, False)
    assert doc["runs"] == [{"nodes": 4, "ratio": 0.28}, {"nodes": 8, "ratio": 0.2}]
    assert doc["machine"]["note"] == "quiet" and len(doc["machine"]["loadavg_at_start"]) == 3


def test_the_bench_is_named_as_scripts_bench_selects_it():
    assert benchsave.bench_name(["--nodes", "4"]) == "bringup"
    assert benchsave.bench_name(["--hub-cdn", "--no-fanout", "--json"]) == "hub-cdn"
    assert benchsave.bench_name(["--hub-faults", "kill"]) == "hub-faults"
    assert benchsave.bench_name(["--nodes", "4", "--resume"]) == "resume"
