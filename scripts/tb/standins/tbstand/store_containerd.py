"""containerd's image store (Docker >= 29 fresh installs): images live under containerd's
root (`root` in /etc/containerd/config.toml, default /var/lib/containerd), not under
data-root, and twice: the compressed layers in the content store and the unpacked ones in
the snapshotter (docs.docker.com/engine/storage/containerd, "Disk space usage").

Layout: <root>/io.containerd.content.v1.content/blobs/sha256/<digest> (compressed layers and
the manifest), <root>/io.containerd.snapshotter.v1.overlayfs/snapshots/<layer>/fs (unpacked).
containerd keeps image records in a bolt db (io.containerd.metadata.v1.bolt/meta.db); the
stand-in keeps the same records (name -> target digest) as JSON beside it. The manifest blob
holds the stand-in's image config, not a real OCI manifest.

As moby reports them (daemon/containerd/image_inspect.go@docker-v29.1.2,
collectRepoTagsAndDigests): Id is the target (manifest) digest; every record's name is in
RepoTags in familiar form, a digest-pulled one too; RepoDigests holds a digested name as it is
and repo@<target> for a tagged one.
"""
import contextlib
import os
import time

from . import images, runtime

DRIVER = "overlayfs"
DEFAULT_ROOT = "/var/lib/containerd"
CONTENT = "io.containerd.content.v1.content"
SNAPSHOTS = "io.containerd.snapshotter.v1.overlayfs"
METADATA = "io.containerd.metadata.v1.bolt"


def root(state):
    """containerd's root as dockerd's containerd has it: the system containerd's (config.toml),
    or, without one, the containerd dockerd starts itself under data-root."""
    if not state.get("system_containerd", True):
        return os.path.join(state["data_root"], "containerd", "daemon")
    return state.get("containerd_root") or DEFAULT_ROOT


def _root(state):
    return runtime.host_path(root(state))


def where(state):
    return os.path.join(root(state), CONTENT)


def _blob(state, digest):
    return os.path.join(_root(state), CONTENT, "blobs", "sha256", digest.split(":", 1)[-1])


def _snapshot(state, layer):
    return os.path.join(_root(state), SNAPSHOTS, "snapshots", layer, "fs", "layer.bin")


def _records_path(state):
    return os.path.join(_root(state), METADATA, "k3tb-images.json")


def _names(state):
    return runtime.read_json(_records_path(state), {}).get("images", {})


def records(state):
    by_target = {}
    for name, rec in sorted(_names(state).items()):
        by_target.setdefault(rec["target"], []).append(name)
    found = []
    for target, names in by_target.items():
        manifest = runtime.read_json(_blob(state, target))
        if manifest is None:
            continue
        tags, digests = [], []
        for name in names:
            tags.append(images.familiar(name))
            digested = name if "@" in name else name.rsplit(":", 1)[0] + "@" + target
            digests.append(images.familiar(digested))
        found.append({"id": target, "repo": manifest["repo"], "manifest": target,
                      "tags": list(dict.fromkeys(tags)), "digests": list(dict.fromkeys(digests)),
                      "created": manifest["created"], "size": manifest["size"],
                      "layers": manifest["layers"], "config": manifest["config"]})
    return found


def pulling_label(repo, tag):
    # tagOrDigest: the tag, or the whole reference for a digest (daemon/containerd/image_pull.go)
    return images.full_name(repo, tag) if tag.startswith("@") else tag


def has_ref(state, repo, tag, digest):
    rec = _names(state).get(images.full_name(repo, tag))
    return rec is not None and rec["target"] == digest and os.path.exists(_blob(state, digest))


def has_content(state, source, digest):
    return os.path.exists(_blob(state, digest))


def fetch(state, source, digest, layers, write):
    size = write(lambda l: [_blob(state, "sha256:" + l), _snapshot(state, l)])
    manifest = {"repo": source.rsplit(":", 1)[0], "created": images.built_at(source), "size": size,
                "layers": layers, "config": images.image_defaults(source)}
    runtime.write_json_atomic(_blob(state, digest), manifest)


def load(state, rec, write):
    """`docker load`: the manifest under its digest, which is the image's id here."""
    size = write(lambda l: [_blob(state, "sha256:" + l), _snapshot(state, l)])
    manifest = {"repo": rec["repo"], "created": rec["created"], "size": size,
                "layers": rec["layers"], "config": rec["config"]}
    runtime.write_json_atomic(_blob(state, rec["id"]), manifest)


def add_loaded(state, repo, tag, rec):
    add_ref(state, repo, tag, rec["id"], None)


def add_ref(state, repo, tag, digest, source):
    now = time.time()
    _update(state, lambda names: names.__setitem__(
        images.full_name(repo, tag), {"target": digest, "created": now, "updated": now}))


def _update(state, change):
    path = _records_path(state)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with runtime.locked(path + ".lock"):
        names = runtime.read_json(path, {}).get("images", {})
        change(names)
        runtime.write_json_atomic(path, {"images": names})


def untag(state, image, gone, left):
    names = [n for n, rec in _names(state).items() if rec["target"] == image["id"]
             and (not left or images.familiar(n) in gone)]
    _update(state, lambda recs: [recs.pop(n, None) for n in names])


def delete(state, image):
    import shutil  # not at the top: read-only calls must not pay for it
    for path in [_blob(state, image["id"])] + [_blob(state, "sha256:" + l) for l in image["layers"]]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    for layer in image["layers"]:
        shutil.rmtree(os.path.dirname(os.path.dirname(_snapshot(state, layer))), ignore_errors=True)
