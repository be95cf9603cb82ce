"""The legacy image store under data-root, in docker's own layout: image/overlay2/
repositories.json (reference -> image id), image/overlay2/imagedb/content/sha256/<id> (the
image config), overlay2/<layer>/diff (the unpacked layers). A node whose data-root moved no
longer sees what it pulled before, as with the real daemon.

References as moby's reference store keeps them (distribution/pull_v2.go@v28.5.1, pullTag):
a pull by tag adds the tag and repo@<manifest digest>; a pull by digest adds only the digest
reference. `image inspect` puts tagged references in RepoTags and digested ones in
RepoDigests, in familiar form (daemon/images/image_inspect.go@docker-v29.1.2).
"""
import contextlib
import os

from . import images, runtime

DRIVER = "overlay2"


def _store(state):
    return os.path.join(runtime.host_path(state["data_root"]), "image", "overlay2")


def where(state):
    return os.path.join(state["data_root"], "overlay2")


def _repositories(state):
    path = os.path.join(_store(state), "repositories.json")
    return runtime.read_json(path, {}).get("Repositories", {})


def _config_path(state, image_id):
    return os.path.join(_store(state), "imagedb", "content", "sha256", image_id.split(":", 1)[1])


def image_id(source_ref):
    """The legacy store's image ID: the config's digest (daemon/internal/image/image.go ID)."""
    return images.config_digest(images.pulled_record(source_ref))


def records(state):
    by_id = {}
    for repo, refs in sorted(_repositories(state).items()):
        for ref, iid in sorted(refs.items()):
            by_id.setdefault(iid, []).append(ref)
    found = []
    for iid, refs in by_id.items():
        config = runtime.read_json(_config_path(state, iid))
        if config is None:
            continue
        meta = config["k3tb"]
        found.append({"id": iid, "repo": meta["repo"], "manifest": meta["manifest"],
                      "tags": [r for r in refs if "@" not in r],
                      "digests": [r for r in refs if "@" in r],
                      "created": meta["created"], "size": meta["size"],
                      "layers": [d[7:] for d in config["rootfs"]["diff_ids"]],
                      "config": config["config"]})
    return found


def pulling_label(repo, tag):
    return tag[1:] if tag.startswith("@") else tag   # tagOrDigest: the tag or "sha256:..."


def has_ref(state, repo, tag, digest):
    iid = _repositories(state).get(repo, {}).get(images.ref_string(repo, tag))
    return iid is not None and os.path.exists(_config_path(state, iid))


def has_content(state, source, digest):
    return os.path.exists(_config_path(state, image_id(source)))


def fetch(state, source, digest, layers, write):
    iid = image_id(source)
    root = runtime.host_path(state["data_root"])
    size = write(lambda l: [os.path.join(root, "overlay2", l, "diff", "layer.bin")])
    config = {"config": images.image_defaults(source),
              "rootfs": {"diff_ids": ["sha256:" + l for l in layers]},
              "k3tb": {"created": images.built_at(source), "size": size, "manifest": digest,
                       "repo": source.rsplit(":", 1)[0]}}
    os.makedirs(os.path.dirname(_config_path(state, iid)), exist_ok=True)
    runtime.write_json_atomic(_config_path(state, iid), config)


def load(state, rec, write):
    """`docker load`: the image under its own id (the config's digest travels in the tar)."""
    root = runtime.host_path(state["data_root"])
    size = write(lambda l: [os.path.join(root, "overlay2", l, "diff", "layer.bin")])
    config = {"config": rec["config"], "rootfs": {"diff_ids": ["sha256:" + l for l in rec["layers"]]},
              "k3tb": {"created": rec["created"], "size": size, "manifest": rec["manifest"],
                       "repo": rec["repo"]}}
    os.makedirs(os.path.dirname(_config_path(state, rec["id"])), exist_ok=True)
    runtime.write_json_atomic(_config_path(state, rec["id"]), config)


def add_loaded(state, repo, tag, rec):
    """A loaded tag: the tag only, no repo@digest (a load brings no distribution metadata)."""
    _update(state, lambda repos: repos.setdefault(repo, {}).__setitem__(
        images.ref_string(repo, tag), rec["id"]))


def add_ref(state, repo, tag, digest, source):
    refs = [f"{repo}@{digest}"] + ([] if tag.startswith("@") else [images.ref_string(repo, tag)])
    _update(state, lambda repos: [repos.setdefault(repo, {}).__setitem__(r, image_id(source))
                                  for r in refs])


def _update(state, change):
    store = _store(state)
    with runtime.locked(os.path.join(store, "repositories.lock")):
        path = os.path.join(store, "repositories.json")
        repos = runtime.read_json(path, {}).get("Repositories", {})
        change(repos)
        for repo in [r for r, refs in repos.items() if not refs]:
            repos.pop(repo)
        runtime.write_json_atomic(path, {"Repositories": repos})


def untag(state, image, gone, left):
    _update(state, lambda repos: [repos.get(image["repo"], {}).pop(r, None) for r in gone])


def delete(state, image):
    import shutil  # not at the top: read-only calls must not pay for it
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_config_path(state, image["id"]))
    for layer in image["layers"]:
        shutil.rmtree(os.path.join(runtime.host_path(state["data_root"]), "overlay2", layer),
                      ignore_errors=True)
