"""`docker save` and `docker load`: an image as a tar stream, and back into the store.

As moby does it (moby/moby@docker-v29.1.2: daemon/internal/image/tarexport/{save,load}.go for
the legacy store, daemon/containerd/image_exporter.go for containerd's): save writes an OCI
layout to stdout (index.json, oci-layout, blobs/sha256/...) with a manifest.json of
[{Config, RepoTags, Layers}] beside it; load reads it from stdin and prints one
"Loaded image: REF" per tag (reference.FamiliarString), or, for an image with no tag,
"Loaded image ID: sha256:...".

The image ID does not survive a trip between the stores. The legacy store's ID is the
config's digest: its save writes a manifest of its own making into index.json (save.go,
`ocispec.Manifest{Config: image.ID, Layers: ...}`) and its load reads manifest.json and the
config blob it names (load.go). containerd's ID is its image's target, the index a pull
fetched: its save puts that target into index.json (archive.WithManifest(img.Target)) and its
load makes the target of whatever index.json names its image (client.Import) - the index of a
containerd save, or the manifest a legacy save made. The config blob travels unchanged either
way, so what `image inspect` reads from it (Created, Os, Architecture, RootFS.Layers) agrees.
The legacy store keeps no registry digest for a loaded image (no distribution metadata).

The stand-in's config blob is images.config_blob; the layer blobs carry the image's size in
zero bytes, as its pulls write them.
"""
import io
import json
import tarfile
import time

from . import images

MANIFEST = "manifest.json"
CHUNK = 1 << 20


class LoadError(Exception):
    pass


def _add(tar, name, data=None, size=0):
    info = tarfile.TarInfo(name)
    info.size = len(data) if data is not None else size
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data) if data is not None else _Zeros(size))


class _Zeros(io.RawIOBase):
    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buf):
        n = min(len(buf), self.left)
        buf[:n] = b"\0" * n
        self.left -= n
        return n


def save(image, out, kind):
    """The tar of one image record on the binary stream `out`, as a `kind` store writes it."""
    blob = images.config_blob(image)
    config_name = "blobs/sha256/" + images.config_digest(image)[7:]
    layers = ["blobs/sha256/" + layer for layer in image["layers"]]
    manifest = [{"Config": config_name, "RepoTags": image["tags"] or None, "Layers": layers}]
    target, target_blob = _target(image, kind)
    names = [{"io.containerd.image.name": images.full_name(*images.parse_ref(t)),
              "org.opencontainers.image.ref.name": images.parse_ref(t)[1]} for t in image["tags"]]
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "digest": target, "annotations": a} for a in names or [{}]]}
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _add(tar, config_name, blob)
        _add(tar, "blobs/sha256/" + target[7:], target_blob)
        for i, name in enumerate(layers):
            _add(tar, name, size=image["size"] if i == 0 else 0)
        _add(tar, "index.json", json.dumps(index).encode())
        _add(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        _add(tar, MANIFEST, json.dumps(manifest).encode())


def _target(image, kind):
    """(digest, blob) of what index.json names: containerd's own target (the pulled index),
    or the manifest the legacy store writes for its config and layers."""
    if kind == "containerd":
        return image["id"], json.dumps({"k3tb-target": image["id"]}).encode()
    made = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": images.config_digest(image)},
                       "layers": [{"digest": "sha256:" + l} for l in image["layers"]]},
                      sort_keys=True).encode()
    return "sha256:" + images.sha256(made.decode()), made


def read(stream):
    """(manifest, config record, layer sizes) from a tar on `stream`, read as a stream once."""
    blobs, manifest = {}, None
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                fh = tar.extractfile(member)
                if fh is None:
                    continue
                if member.name == MANIFEST or member.name.endswith(".json") or \
                        member.size < CHUNK and member.name.startswith("blobs/"):
                    data = fh.read()
                    if member.name == MANIFEST:
                        manifest = json.loads(data)
                    else:
                        blobs[member.name] = data
                else:
                    while fh.read(CHUNK):
                        pass
                    blobs[member.name] = member.size
    except (tarfile.TarError, ValueError, EOFError) as e:
        raise LoadError(f"unexpected EOF" if isinstance(e, EOFError) else str(e)) from None
    if not manifest:
        raise LoadError("open /var/lib/docker/tmp/docker-import/manifest.json: no such file "
                        "or directory")
    return manifest, blobs


def loaded_record(manifest_item, blobs, index, kind):
    """The image record a `kind` store makes of one manifest.json item: the legacy store's ID
    is the config blob's digest, containerd's the digest index.json names."""
    blob = blobs.get(manifest_item["Config"])
    if not isinstance(blob, bytes):
        raise LoadError(f"open {manifest_item['Config']}: no such file or directory")
    for name in manifest_item["Layers"]:
        if name not in blobs:
            raise LoadError(f"open {name}: no such file or directory")
    config = json.loads(blob)
    if kind == "containerd":
        if not index or not index.get("manifests"):
            raise LoadError("unrecognized image format")   # containerd reads index.json only
        image_id = index["manifests"][0]["digest"]
    else:
        image_id = "sha256:" + images.sha256(blob.decode())
    sizes = [blobs[n] if isinstance(blobs[n], int) else len(blobs[n]) for n in manifest_item["Layers"]]
    tags = manifest_item.get("RepoTags") or []
    return {"id": image_id, "manifest": image_id if kind == "containerd" else "",
            "repo": images.parse_ref(tags[0])[0] if tags else "<none>",
            "created": _seconds(config["created"]), "size": sum(sizes),
            "layers": [d[7:] for d in config["rootfs"]["diff_ids"]], "config": config["config"]}


def _seconds(text):
    """RFC 3339 (whole seconds, as the stand-in's configs carry) -> seconds since the epoch."""
    import calendar
    return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))


def store_kind(state):
    return "containerd" if state.get("image_store") == "containerd" else "overlay2"


def load(state, stream):
    """Each image in the tar into the daemon's store; returns the lines docker prints."""
    st = images.store(state)
    kind = store_kind(state)
    manifest, blobs = read(stream)
    index = json.loads(blobs["index.json"]) if isinstance(blobs.get("index.json"), bytes) else None
    lines = []
    for item in manifest:
        rec = loaded_record(item, blobs, index, kind)
        st.load(state, rec, lambda paths: _write_layers(paths, rec))
        tags = item.get("RepoTags") or []
        for tag in tags:
            repo, name = images.parse_ref(tag)
            st.add_loaded(state, repo, name, rec)
            lines.append(f"Loaded image: {images.ref_string(repo, name)}")
        if not tags:
            lines.append(f"Loaded image ID: {rec['id']}")
    return lines


def _write_layers(paths, rec):
    """The layer files as a pull writes them (images.write_layers, without its pacing)."""
    import os
    for i, layer in enumerate(rec["layers"]):
        for path in paths(layer):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:   # real bytes: a full disk fails the load
                for _ in range((rec["size"] if i == 0 else 0) // CHUNK):
                    f.write(b"\0" * CHUNK)
    return rec["size"]
