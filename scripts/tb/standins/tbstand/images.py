"""Image references, the simulated registry, and the daemon's image store (one of two).

Which store a daemon uses is decided when it starts (daemon.py): the legacy overlay2 store
under data-root (Docker <= 28, and hosts upgraded from it; store_overlay2.py) or containerd's
image store under containerd's root (fresh Docker >= 29 installs; store_containerd.py). Both
hand back the same image records: {id, repo, manifest, tags, digests, created, size, layers,
config}, `tags`/`digests` in docker's familiar form (no docker.io/, no library/).
"""
import re
import sys

from . import runtime

COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPO_RE = re.compile(rf"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{COMPONENT}(?:/{COMPONENT})*$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENGINE_REPOS = ("lmsysorg/sglang", "vllm/vllm-openai")
ROUTER_REPO = "lightseekorg/smg"   # the SGLang router: the real one runs (engine/router.py)
# The simulated registry's catalogue: the tags a digest reference can name (a pull by tag
# accepts any tag but *does-not-exist). Test data, not behaviour: the digest of a tag is
# manifest_digest("repo:tag"), as `docker pull` and `image inspect` report it.
CATALOGUE = {"lmsysorg/sglang": ("kimi-k3", "kimi-k3-cu12", "latest"),
             "vllm/vllm-openai": ("nightly", "latest")}


class RefError(Exception):
    pass


def parse_ref(ref):
    """'lmsysorg/sglang:kimi-k3' -> ('lmsysorg/sglang', 'kimi-k3'); a digest reference keeps
    '@sha256:...' as its tag (a tag beside a digest is ignored, as `docker pull` does)."""
    name, tag = ref, "latest"
    if "@" in name:
        name, tag = name.split("@", 1)
        if not DIGEST_RE.match(tag):
            raise RefError("invalid reference format")
        tag = "@" + tag
        if ":" in name.rsplit("/", 1)[-1]:
            name = name.rsplit(":", 1)[0]
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
    """The familiar form docker prints: 'repo:tag' or 'repo@sha256:...'."""
    return f"{repo}{tag}" if tag.startswith("@") else f"{repo}:{tag}"


def full_name(repo, tag):
    """containerd's image name: the fully qualified reference (docker.io/library/...)."""
    first = repo.split("/", 1)[0]
    domain = "" if "." in first or ":" in first else (
        "docker.io/" if "/" in repo else "docker.io/library/")
    return domain + ref_string(repo, tag)


def familiar(name):
    """reference.FamiliarString: docker.io/library/x:t -> x:t, docker.io/a/b:t -> a/b:t."""
    for prefix in ("docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def manifest_digest(ref):
    """The registry's manifest digest for a 'repo:tag' (what `docker pull` prints)."""
    return "sha256:" + sha256("manifest:" + ref)


def resolve(repo, tag):
    """What the registry serves for a reference: (manifest digest, the 'repo:tag' it is), or
    None (manifest unknown)."""
    if tag.startswith("@"):
        for known in CATALOGUE.get(repo, ()):
            if manifest_digest(ref_string(repo, known)) == tag[1:]:
                return tag[1:], ref_string(repo, known)
        return None
    if tag.endswith("does-not-exist"):
        return None
    return manifest_digest(ref_string(repo, tag)), ref_string(repo, tag)


def sha256(text):
    return runtime.digest("sha256", text.encode()).hexdigest()


def layer_ids(source_ref):
    return [sha256(f"{source_ref}:{i}") for i in range(3)]


# The registry's images were built once: a pull reports the build time, not the pull's.
BUILT = 1767225600


def built_at(source_ref):
    return BUILT + int(sha256("built:" + source_ref)[:4], 16)


def pulled_record(source_ref):
    """What the registry's image config says of `source_ref` (every store reads the same)."""
    return {"config": image_defaults(source_ref), "layers": layer_ids(source_ref),
            "created": built_at(source_ref)}


def config_blob(rec):
    """The image config as one blob (its digest is the legacy store's image ID; both stores
    report Created, Os, Architecture and RootFS.Layers from it: daemon/images/image_inspect.go,
    daemon/containerd/image_inspect.go@docker-v29.1.2)."""
    import json
    return json.dumps({"architecture": "amd64", "os": "linux", "config": rec["config"],
                       "created": runtime.rfc3339(rec["created"]),
                       "rootfs": {"type": "layers",
                                  "diff_ids": ["sha256:" + l for l in rec["layers"]]}},
                      sort_keys=True, separators=(",", ":")).encode()


def config_digest(rec):
    return "sha256:" + sha256(config_blob(rec).decode())


def image_defaults(source_ref):
    """Entrypoint/Cmd/Env the real images carry; engine images declare the CUDA they need,
    which the NVIDIA toolkit checks against the driver when a container gets GPUs."""
    repo, tag = source_ref.rsplit(":", 1)
    env = [DEFAULT_PATH]
    entrypoint, cmd, workdir = None, ["/bin/bash"], "/"
    if repo in ENGINE_REPOS:
        cuda = "12.8" if "cu12" in tag else "13.0"
        env += [f"CUDA_VERSION={cuda}.1", f"NVIDIA_REQUIRE_CUDA=cuda>={cuda}",
                "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        workdir = "/sgl-workspace" if repo == "lmsysorg/sglang" else "/vllm-workspace"
        if repo == "vllm/vllm-openai":
            entrypoint, cmd = ["vllm", "serve"], None
    if repo == ROUTER_REPO:
        # smg-project/smg@f8daa883 docker/Dockerfile: base stage ENV VIRTUAL_ENV, PATH; the
        # router-image stage's ENTRYPOINT (engine/router.py runs it)
        env = ["PATH=/opt/venv/bin:/opt/ffmpeg/bin:/root/.local/bin:" + DEFAULT_PATH[5:],
               "VIRTUAL_ENV=/opt/venv"]
        entrypoint, cmd = ["python3", "-m", "smg.launch_router"], None
    return {"Env": env, "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": workdir}


def store(state):
    """The image store module of a running daemon's state."""
    if state.get("image_store") == "containerd":
        from . import store_containerd
        return store_containerd
    from . import store_overlay2
    return store_overlay2


def all_images(state):
    return store(state).records(state)


def lookup(state, name):
    """The image `name` refers to (a tag, a digest reference, an id or id prefix), or None."""
    bare = name[7:] if name.startswith("sha256:") else name
    try:
        wanted = ref_string(*parse_ref(name))
    except RefError:
        wanted = None
    for image in all_images(state):
        if wanted in image["tags"] or wanted in image["digests"]:
            return image
        if len(bare) >= 4 and image["id"][7:].startswith(bare):
            return image
    return None


def _progress(line):
    print(line, flush=True)


def pull(state, repo, tag, node):
    """Fetch from the (simulated) registry into the daemon's store; 0 or docker's exit code 1.
    Output as moby writes it without a TTY (distribution/pull_v2.go, daemon/containerd/
    image_pull.go) followed by the CLI's last line, the reference (cli/command/image/pull.go)."""
    st = store(state)
    ref = ref_string(repo, tag)
    found = resolve(repo, tag)
    if found is None:
        what = f"{repo}@{tag[1:]}" if tag.startswith("@") else ref
        print(f"Error response from daemon: manifest for {what} not found: manifest unknown: "
              "manifest unknown", file=sys.stderr)
        return 1
    digest, source = found
    _progress(f"{st.pulling_label(repo, tag)}: Pulling from {repo if '/' in repo else 'library/' + repo}")
    if st.has_ref(state, repo, tag, digest):
        print(f"Digest: {digest}\nStatus: Image is up to date for {ref}\n{full_name(repo, tag)}",
              flush=True)
        return 0
    try:
        _fetch(st, state, source, digest, node)
    except OSError as e:
        print(f"failed to register layer: write {st.where(state)}: {e.strerror.lower()}",
              file=sys.stderr)
        return 1
    st.add_ref(state, repo, tag, digest, source)
    print(f"Digest: {digest}\nStatus: Downloaded newer image for {ref}\n{full_name(repo, tag)}",
          flush=True)
    return 0


def _fetch(st, state, source, digest, node):
    """The layers the store lacks, as moby reports them: "Already exists" or fetched."""
    layers = layer_ids(source)
    if st.has_content(state, source, digest):
        for layer in layers:
            _progress(f"{layer[:12]}: Already exists")
        return
    for layer in layers:
        _progress(f"{layer[:12]}: Pulling fs layer")
    step = float(node.get("pull_seconds", 0.5)) / (2 * len(layers))
    size_mib = int(node.get("image_size_mib", 4))
    st.fetch(state, source, digest, layers, lambda paths: write_layers(paths, layers, step, size_mib))


def write_layers(paths, layers, step, size_mib):
    """Real bytes, so a full disk fails the pull as it would. paths(layer) -> the files that
    layer occupies (one per copy the store keeps); the first layer carries the image's size."""
    import contextlib
    import os
    import time
    total = 0
    chunk = b"\0" * (1 << 20)
    for i, layer in enumerate(layers):
        time.sleep(step)
        _progress(f"{layer[:12]}: Download complete")
        mib = size_mib if i == 0 else 0
        for path in paths(layer):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(path, "wb") as f:
                    for _ in range(mib):
                        f.write(chunk)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise
        total += mib << 20
        time.sleep(step)
        _progress(f"{layer[:12]}: Pull complete")
    return total


def inspect_object(image, state):
    """`docker image inspect` of one image: RepoTags/RepoDigests as the store reports them
    (daemon/images/image_inspect.go; daemon/containerd/image_inspect.go)."""
    return {"Id": image["id"], "RepoTags": image["tags"], "RepoDigests": image["digests"],
            "Created": runtime.rfc3339(image["created"]), "Size": image["size"],
            "Architecture": "amd64", "Os": "linux", "Config": image["config"],
            "RootFS": {"Type": "layers", "Layers": ["sha256:" + l for l in image["layers"]]},
            "GraphDriver": {"Name": store(state).DRIVER, "Data": None},
            "Metadata": {"LastTagTime": "0001-01-01T00:00:00Z"}}


def untagged(image, ref):
    """Which references `docker rmi REF` removes, and which stay: REF itself, or every one for
    an id; digest references do not keep an image whose last tag went."""
    refs = image["tags"] + image["digests"]
    try:
        wanted = ref_string(*parse_ref(ref))
    except RefError:
        wanted = None
    gone = [wanted] if wanted in refs else refs
    left = [r for r in refs if r not in gone]
    if not any("@" not in r for r in left):
        gone, left = refs, []
    return gone, left


def remove(state, image, ref):
    """`docker rmi REF`: untag REF (every reference when REF is an id); the content goes with
    the last tag (digest references do not keep it). Returns the lines docker prints."""
    st = store(state)
    gone, left = untagged(image, ref)
    st.untag(state, image, gone, left)
    lines = [f"Untagged: {r}" for r in gone]
    if not left:
        st.delete(state, image)
        lines.append(f"Deleted: {image['id']}")
    return lines
