"""The keys of the class's cache: what a build or a compiled library depends on, by content, so that
every host of a class that runs the same versions names a setting's file alike (a setting built
anywhere is built once) and a host that runs other versions never reads it.

A key is a hash of the setting (``Spec``), the resolved target (its architecture: "auto" is another
GPU on another host), the versions of TVM, its ffi and NVRTC, and the explorer's own source by
content (not by modification times, which differ between two checkouts of one commit). Nothing here
imports TVM: the launcher's ``worker`` command names its host's versions (the engine's resource,
``host_resource``) before it starts the worker processes.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from pathlib import Path

from ..cuda_env import nvrtc_version

PACKAGE = Path(__file__).resolve().parents[1]  # explorer/
DISTRIBUTIONS = ("apache-tvm", "apache-tvm-ffi")  # what builds and libraries are made with, besides NVRTC


@functools.cache
def versions() -> str:
    """TVM's, its ffi's and NVRTC's versions on this host, as one line."""
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} none")
    nvrtc = nvrtc_version()
    found.append(f"nvrtc {'.'.join(map(str, nvrtc)) if nvrtc else 'none'}")
    return ", ".join(found)


@functools.cache
def source_fingerprint() -> str:
    """The explorer package's source as this process first saw it: an edited checkout never reads
    a build made by the code before, and two hosts with the same source share their builds."""
    return package_fingerprint(PACKAGE)


def package_fingerprint(package: Path) -> str:
    """A hash of the name and content of every Python file under ``package`` (4 ms for the explorer's)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(f"{path.relative_to(package)}|{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def content_key(kind: str, spec, target: str, with_versions: str | None = None, source: str | None = None) -> str:
    """The name of ``spec``'s ``kind`` ("build" or "library") for the resolved ``target``: everything
    its content depends on (``with_versions``, ``source``: this host's unless given)."""
    with_versions = versions() if with_versions is None else with_versions
    source = source_fingerprint() if source is None else source
    text = f"{kind}|{with_versions}|{source}|{target}|{spec!r}"
    return hashlib.sha256(text.encode()).hexdigest()


def host_resource() -> str:
    """The engine's resource that this host's worker processes offer and a server's tasks ask for:
    a task only goes to a worker of the same versions and source (another checkout, TVM or NVRTC
    would return builds this server cannot read, or kernels it did not ask for)."""
    return "explorer-" + hashlib.sha256(f"{versions()}|{source_fingerprint()}".encode()).hexdigest()[:16]
