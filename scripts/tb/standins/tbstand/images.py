"""Images under the daemon's data root, in docker's own layout (image/overlay2/...), so a node
whose data-root moved no longer sees what it pulled before, as with the real daemon."""
import contextlib
import os
import re
import sys
import time

from . import runtime

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPO_RE = re.compile(rf"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{COMPONENT}(?:/{COMPONENT})*$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENGINE_REPOS = ("lmsysorg/sglang", "vllm/vllm-openai")


class RefError(Exception):
    pass


def parse_ref(ref):
    """'lmsysorg/sglang:kimi-k3' -> ('lmsysorg/sglang', 'kimi-k3'); docker.io and library/ dropped."""
    name, tag = ref, "latest"
    if "@" in name:
        name, tag = name.split("@", 1)
        tag = "@" + tag
    elif ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
        if not TAG_RE.match(tag):
            raise RefError("invalid reference format")
    for prefix in ("docker.io/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name != name.lower() and REPO_RE.match(name.lower()):
        path = name if "/" in name else "library/" + name
        raise RefError(f"invalid reference format: repository name ({path}) must be lowercase")
    if not REPO_RE.match(name):
        raise RefError("invalid reference format")
    return name, tag


def ref_string(repo, tag):
    return f"{repo}{tag}" if tag.startswith("@") else f"{repo}:{tag}"


def image_defaults(repo, tag):
    """Entrypoint/Cmd/Env the real images carry; engine images declare the CUDA they need,
    which the NVIDIA toolkit checks against the driver when a container gets GPUs."""
    env = [DEFAULT_PATH]
    entrypoint, cmd, workdir = None, ["/bin/bash"], "/"
    if repo in ENGINE_REPOS:
        cuda = "12.8" if "cu12" in tag else "13.0"
        env += [f"CUDA_VERSION={cuda}.1", f"NVIDIA_REQUIRE_CUDA=cuda>={cuda}",
                "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        workdir = "/sgl-workspace" if repo == "lmsysorg/sglang" else "/vllm-workspace"
        if repo == "vllm/vllm-openai":
            entrypoint, cmd = ["vllm", "serve"], None
    return {"Env": env, "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": workdir}


def _store(data_root):
    return os.path.join(runtime.host_path(data_root), "image", "overlay2")


def _repositories(data_root):
    return runtime.read_json(os.path.join(_store(data_root), "repositories.json"), {}).get("Repositories", {})


def all_images(data_root):
    """[{id, repo, tag, ref, created, size, config}] for every tag present under data_root."""
    found = []
    for repo, tags in sorted(_repositories(data_root).items()):
        for ref, image_id in sorted(tags.items()):
            hexid = image_id.split(":", 1)[1]
            config = runtime.read_json(os.path.join(_store(data_root), "imagedb", "content", "sha256", hexid))
            if config is None:
                continue
            tag = ref[len(repo):].lstrip(":")
            found.append({"id": image_id, "repo": repo, "tag": tag, "ref": ref,
                          "created": config["k3tb"]["created"], "size": config["k3tb"]["size"],
                          "layers": [d[7:] for d in config["rootfs"]["diff_ids"]],
                          "config": config["config"]})
    return found


def lookup(data_root, name):
    """The image `name` refers to (ref, or id / id prefix), or None."""
    bare = name[7:] if name.startswith("sha256:") else name
    try:
        wanted = ref_string(*parse_ref(name))
    except RefError:
        wanted = None
    for image in all_images(data_root):
        if image["ref"] == wanted or len(bare) >= 4 and image["id"][7:].startswith(bare):
            return image
    return None


def _progress(line):
    print(line, flush=True)


def pull(data_root, repo, tag, node):
    """Fetch from the (simulated) registry into data_root; returns 0 or docker's exit code 1."""
    ref = ref_string(repo, tag)
    digest = manifest_digest(ref)
    if tag.endswith("does-not-exist"):
        print(f"Error response from daemon: manifest for {ref} not found: manifest unknown: "
              "manifest unknown", file=sys.stderr)
        return 1
    _progress(f"{tag.lstrip('@')}: Pulling from {repo if '/' in repo else 'library/' + repo}")
    if lookup(data_root, ref):
        print(f"Digest: {digest}\nStatus: Image is up to date for {ref}\ndocker.io/{ref}", flush=True)
        return 0
    layers = [_sha256(f"{ref}:{i}") for i in range(3)]
    for layer in layers:
        _progress(f"{layer[:12]}: Pulling fs layer")
    step = float(node.get("pull_seconds", 0.5)) / (2 * len(layers))
    try:
        size = _write_layers(data_root, layers, step, int(node.get("image_size_mib", 4)))
    except OSError as e:
        print(f"failed to register layer: write {data_root}/overlay2: {os.strerror(e.errno)}",
              file=sys.stderr)
        return 1
    _record(data_root, repo, tag, layers, size)
    print(f"Digest: {digest}\nStatus: Downloaded newer image for {ref}\ndocker.io/{ref}", flush=True)
    return 0


def _write_layers(data_root, layers, step, size_mib):
    """Real bytes on the data root's filesystem, so a full disk fails the pull as it would."""
    total = 0
    chunk = b"\0" * (1 << 20)
    for i, layer in enumerate(layers):
        time.sleep(step)
        _progress(f"{layer[:12]}: Download complete")
        diff = os.path.join(runtime.host_path(data_root), "overlay2", layer, "diff")
        os.makedirs(diff, exist_ok=True)
        mib = size_mib if i == 0 else 0
        try:
            with open(os.path.join(diff, "layer.bin"), "wb") as f:
                for _ in range(mib):
                    f.write(chunk)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(diff, "layer.bin"))
            raise
        total += mib << 20
        time.sleep(step)
        _progress(f"{layer[:12]}: Pull complete")
    return total


def _record(data_root, repo, tag, layers, size):
    hexid = _sha256("image:" + ref_string(repo, tag))
    store = _store(data_root)
    content = os.path.join(store, "imagedb", "content", "sha256")
    os.makedirs(content, exist_ok=True)
    config = {"config": image_defaults(repo, tag), "rootfs": {"diff_ids": ["sha256:" + l for l in layers]},
              "k3tb": {"created": time.time(), "size": size}}
    runtime.write_json_atomic(os.path.join(content, hexid), config)
    with runtime.locked(os.path.join(store, "repositories.lock")):
        path = os.path.join(store, "repositories.json")
        repos = runtime.read_json(path, {}).get("Repositories", {})
        repos.setdefault(repo, {})[ref_string(repo, tag)] = "sha256:" + hexid
        runtime.write_json_atomic(path, {"Repositories": repos})


def manifest_digest(ref):
    """The registry's manifest digest for a reference (what `docker pull` prints)."""
    return "sha256:" + _sha256("manifest:" + ref)


def _sha256(text):
    return runtime.digest("sha256", text.encode()).hexdigest()


def inspect_object(image):
    digests = [f"{image['repo']}@{manifest_digest(image['ref'])}"]
    return {"Id": image["id"], "RepoTags": [image["ref"]], "RepoDigests": digests,
            "Created": runtime.rfc3339(image["created"]), "Size": image["size"],
            "Architecture": "amd64", "Os": "linux", "Config": image["config"],
            "RootFS": {"Type": "layers"}}



def remove(data_root, image):
    """Untag and delete the image's config and layers (frees the disk, as `docker rmi` does)."""
    import shutil  # not at the top: read-only calls must not pay for it
    store = _store(data_root)
    with runtime.locked(os.path.join(store, "repositories.lock")):
        path = os.path.join(store, "repositories.json")
        repos = runtime.read_json(path, {}).get("Repositories", {})
        repos.get(image["repo"], {}).pop(image["ref"], None)
        if not repos.get(image["repo"]):
            repos.pop(image["repo"], None)
        runtime.write_json_atomic(path, {"Repositories": repos})
    hexid = image["id"][7:]
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(store, "imagedb", "content", "sha256", hexid))
    for layer in image["layers"]:
        shutil.rmtree(os.path.join(runtime.host_path(data_root), "overlay2", layer), ignore_errors=True)
