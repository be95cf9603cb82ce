"""SGLang launch defaults against the cookbook image's first multi-node decode hang, each
with where it comes from, and which SGLang releases accept it. Pure.

sgl-project/sglang#39568 (open): `lmsysorg/sglang:kimi-k3` (SGLang 0.5.16) serving Kimi-K3
with TP16 over 4 nodes: after a ~1800 s load the server comes up, then the first decode step
of a batch of 32 long requests never completes and the scheduler watchdog (300 s by default)
ends every rank. The reporter's run that did not hang launched with the three flags below;
the issue does not single out one of them, so k3deploy passes all three where the image's
SGLang accepts them. A user turns one off with `engine.args: {FLAG: null}`.

Which releases accept each flag, read from the wheels' `sglang/srt/server_args.py`
(tests/fixtures/real/sglang/<version>/server-args-decode-flags.txt): `--watchdog-timeout`
and `--model-loader-extra-config` are in 0.5.4, 0.5.10 and 0.5.16; `--disable-flashinfer-
autotune` first in 0.5.10 (not in 0.5.4); all three in 0.5.23 (engines/cli_tables/
sglang.json). An image whose release is not known gets them all (the newest table's rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3deploy.engines.spec import FlagValue

ISSUE = "sgl-project/sglang#39568"
WORKING_WATCHDOG_S = 3600
MULTITHREAD_LOAD = '{"enable_multithread_load": true}'
# The SGLang release an image is built on, where its build says so: the cookbook's
# docker/kimi_k3/kimi_k3_cu13.Dockerfile@0d64ba8b is FROM lmsysorg/sglang:v0.5.16 (#39568 calls
# the image "sglang 0.5.16"). Other images: their `vX.Y.Z` tag, else not known.
IMAGE_SGLANG = {"lmsysorg/sglang:kimi-k3": (0, 5, 16)}
_VERSION_TAG = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-.].*)?$")


@dataclass(frozen=True)
class DefaultFlag:
    name: str                      # the long option without "--"
    value: FlagValue
    since: tuple[int, int, int]    # the oldest release read that accepts it
    why: str                       # where it comes from, for docs and errors


DECODE_HANG_FLAGS = (
    DefaultFlag("watchdog-timeout", WORKING_WATCHDOG_S, (0, 5, 4),
                f"{ISSUE}: the scheduler watchdog (300 s) ended the first multi-node decode; "
                "the reporter's working launch sets 3600"),
    DefaultFlag("disable-flashinfer-autotune", True, (0, 5, 10),
                f"{ISSUE}: the hang follows the FlashInfer autotune at start-up; the working "
                "launch disables it"),
    DefaultFlag("model-loader-extra-config", MULTITHREAD_LOAD, (0, 5, 4),
                f"{ISSUE}: the working launch's loader setting (the multi-thread loader, "
                "default since 0.5.10: sgl-project/sglang#20289)"),
)


def image_sglang(image: str) -> tuple[int, int, int] | None:
    """The SGLang release an image runs, when known from its name."""
    ref = image.split("@", 1)[0]
    if ref in IMAGE_SGLANG:
        return IMAGE_SGLANG[ref]
    match = _VERSION_TAG.search(ref)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def accepts(version: tuple[int, int, int] | None, flag: DefaultFlag) -> bool:
    return version is None or version >= flag.since


def decode_hang_flags(image: str) -> list[tuple[str, FlagValue]]:
    """The defaults this image's SGLang accepts, in their fixed order."""
    version = image_sglang(image)
    return [(f.name, f.value) for f in DECODE_HANG_FLAGS if accepts(version, f)]


def refused(image: str, names: list[str]) -> list[str]:
    """Of the option names given (no "--"), those among the defaults that this image's
    SGLang is known not to accept: what the launch contract reports."""
    version = image_sglang(image)
    if version is None:   # not known: every default is accepted (accepts)
        return []
    return [f"--{f.name} is not an option of SGLang {'.'.join(map(str, version))} (the "
            f"image {image}); it is in {'.'.join(map(str, f.since))} and later"
            for f in DECODE_HANG_FLAGS if f.name in names and not accepts(version, f)]


def fix_text() -> str:
    """The launch flags that avoided the hang, as a user types them."""
    return (f"--watchdog-timeout {WORKING_WATCHDOG_S} --disable-flashinfer-autotune "
            f"--model-loader-extra-config '{MULTITHREAD_LOAD}'")
