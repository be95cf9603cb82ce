"""`docker save` and `docker load`: an image as a tar stream, and back into the store.

As moby does it (daemon/internal/image/tarexport/{save,load,tarexport}.go and daemon/containerd/
image_exporter.go, moby/moby@b985e2313a8676e18072b442911fc8f64f17d440): save writes the tar to
stdout, with a manifest.json of [{Config, RepoTags, Layers}] naming the config and layer
blobs under blobs/sha256/. load reads it from stdin and prints one "Loaded image: REF" per tag
(reference.FamiliarString), or, for an image with no tag, "Loaded image ID: sha256:...". The
image ID survives the trip: the legacy store's ID is the config's digest and the containerd
store's the manifest's, and both travel in the tar. The legacy store keeps no registry digest
for a loaded image (no distribution metadata), so RepoDigests stay empty there.

The stand-in's config blob is its own image record (images.py), not an OCI config; the layer
blobs carry the image's size in zero bytes, as its pulls write them.
"""
import io
import json
import tarfile

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


def save(image, out):
    """The tar of one image record on the binary stream `out`."""
    config = {"k3tb": {k: image[k] for k in ("id", "repo", "manifest", "created", "size",
                                              "layers", "config")}}
    blob = json.dumps(config, sort_keys=True).encode()
    config_name = "blobs/sha256/" + images.sha256(blob.decode())
    layers = ["blobs/sha256/" + layer for layer in image["layers"]]
    manifest = [{"Config": config_name, "RepoTags": image["tags"] or None, "Layers": layers}]
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _add(tar, config_name, blob)
        for i, name in enumerate(layers):
            _add(tar, name, size=image["size"] if i == 0 else 0)
        _add(tar, MANIFEST, json.dumps(manifest).encode())


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


def loaded_record(manifest_item, blobs):
    blob = blobs.get(manifest_item["Config"])
    if not isinstance(blob, bytes):
        raise LoadError(f"open {manifest_item['Config']}: no such file or directory")
    for name in manifest_item["Layers"]:
        if name not in blobs:
            raise LoadError(f"open {name}: no such file or directory")
    return json.loads(blob)["k3tb"]


def load(state, stream):
    """Each image in the tar into the daemon's store; returns the lines docker prints."""
    st = images.store(state)
    manifest, blobs = read(stream)
    lines = []
    for item in manifest:
        rec = loaded_record(item, blobs)
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
