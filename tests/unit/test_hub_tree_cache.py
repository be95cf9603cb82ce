"""The laptop keeps a commit's file list (cluster/hubmeta.py): the Hub is asked which commit
the revision is on every run, and lists a commit's files only once."""

from types import SimpleNamespace

from k3deploy.cluster import hubmeta


class Api:
    endpoint = "https://hub.example"

    def __init__(self, sha="a" * 40):
        self.sha, self.calls = sha, []

    def repo_info(self, repo, revision):
        self.calls.append("info")
        return SimpleNamespace(sha=self.sha)

    def list_repo_tree(self, repo, revision, recursive):
        self.calls.append(("tree", revision))
        lfs = SimpleNamespace(sha256="b" * 64)
        return [SimpleNamespace(path="z.json", size=5, lfs=None, blob_id="d" * 40),
                SimpleNamespace(path="a.safetensors", size=3, lfs=lfs, blob_id="c" * 40),
                SimpleNamespace(path="folder")]  # a folder: no size, not a file


def resolve(monkeypatch, api, cache):
    monkeypatch.setattr(hubmeta, "_api", lambda endpoint, token: api)
    return hubmeta.resolve("moonshotai/Kimi-K3", "main", None, None, cache=cache)


def test_a_commits_files_are_listed_once_and_the_revision_asked_every_time(monkeypatch, tmp_path):
    api = Api()
    first = resolve(monkeypatch, api, tmp_path)
    second = resolve(monkeypatch, api, tmp_path)
    assert api.calls == ["info", ("tree", "a" * 40), "info"]
    assert first == second and [f.path for f in second.files] == ["a.safetensors", "z.json"]
    assert second.files[0].sha256 == "b" * 64 and second.files[1].sha256 is None


def test_a_moved_branch_is_listed_again(monkeypatch, tmp_path):
    resolve(monkeypatch, Api("a" * 40), tmp_path)
    moved = Api("e" * 40)
    assert resolve(monkeypatch, moved, tmp_path).sha == "e" * 40
    assert moved.calls == ["info", ("tree", "e" * 40)]


def test_an_unreadable_or_foreign_kept_list_is_listed_again(monkeypatch, tmp_path):
    resolve(monkeypatch, Api(), tmp_path)
    (kept,) = tmp_path.iterdir()
    for text in ["{not json", '{"endpoint": "https://other", "repo": "x", "sha": "y", "files": []}',
                 '{"endpoint": "https://hub.example"}']:
        kept.write_text(text)
        api = Api()
        assert len(resolve(monkeypatch, api, tmp_path).files) == 2
        assert api.calls == ["info", ("tree", "a" * 40)], text


def test_without_a_cache_every_run_lists(monkeypatch):
    api = Api()
    resolve(monkeypatch, api, None)
    resolve(monkeypatch, api, None)
    assert api.calls.count(("tree", "a" * 40)) == 2
