#!/usr/bin/env python3
"""Build the slurmguard test-cluster image, tagged by a hash of everything that goes in it.

    python docker-slurm/build_image.py                    # Debian 12, Slurm 22.05; print the tag
    python docker-slurm/build_image.py --release trixie   # Debian 13, Slurm 24.11
    python docker-slurm/build_image.py --release forky    # Debian testing, Slurm 26.05
    python docker-slurm/build_image.py --force            # build even if the tag exists

The tag is ``slurmguard-node:<first 12 hex of sha256>`` (``slurmguard-node:trixie-<hash>``
for Debian 13) over the release, the Dockerfile, the files of docker-slurm/, the package
sources, pyproject.toml, the hook scripts and the stand-in NVML source;
``slurmguard-node:latest`` (``:trixie``) points at the newest build (compose uses it). A
build whose tag already exists is skipped, so the e2e suite and CI build once and reuse.

The context is assembled in a temporary directory: wheels of slurmguard and its
dependencies built on the host (pip inside a container cannot reach PyPI where TLS is
intercepted; sites without internet pass ``--find-links DIR``), the stand-in
``libnvidia-ml.so.1`` compiled with the host's gcc by tests/fakehw/nvml.py (Debian 12's
glibc, the same as bookworm's), the fixture writers of tests/fakehw for ``sg-fault``, and
the checkout's prolog/ and epilog/ entry scripts. The build runs with ``--network host`` because the
engine may run without a default bridge (see docs/docker.md).

Releases whose Python differs from the host's (trixie: 3.13, forky: 3.14, host Debian 12:
3.11) get the same wheels retargeted: pure wheels as built, and each compiled one (``psycopg-binary``,
``SQLAlchemy``, ...) replaced by the release's build of the same version, fetched with
``pip download --python-version``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
IMAGE = "slurmguard-node"
# What goes into the image; any change to these files gives a new tag.
DOCKER_FILES = ("Dockerfile", "entrypoint.sh", "sg-fault", "sg-reboot", "slurm.conf.in")
FAKEHW = REPO / "tests" / "fakehw"
# tests/fakehw modules copied into the image for sg-fault (the suite's own record writers).
FAKEHW_MODULES = ("kmsg.py", "nvml.py")
RUNTIME_GLOBS = ("prolog/*", "epilog/*", "pyproject.toml", "README.md", "docker-slurm/etc/**/*",
                 "tests/fakehw/*.py", "tests/fakehw/*.c", "tests/fakehw/*.h")
PACKAGE_GLOBS = ("slurmguard/**/*",)


@dataclass(frozen=True)
class Release:
    """A Debian release the image is built on, and what it ships."""

    name: str      # Debian code name: the base image is debian:<name>
    debian: str    # Debian version
    python: str    # python3's minor version there
    slurm: str     # Slurm major as packaged there (checked by the e2e suite)


RELEASES = {
    "bookworm": Release("bookworm", "12", "3.11", "22.05"),
    "trixie": Release("trixie", "13", "3.13", "24.11"),
    # Debian testing (forky, 14 to be): Slurm 26.05 and Python 3.14 as of 2026-10.
    "forky": Release("forky", "14", "3.14", "26.05"),
}
DEFAULT_RELEASE = "bookworm"


def release(name: str) -> Release:
    try:
        return RELEASES[name]
    except KeyError:
        raise SystemExit(f"build_image: release: unknown Debian release {name!r}; "
                         f"known: {', '.join(RELEASES)}") from None


def _inputs(include_package: bool) -> list[Path]:
    files = {HERE / name for name in DOCKER_FILES}
    for pattern in RUNTIME_GLOBS + (PACKAGE_GLOBS if include_package else ()):
        files.update(p for p in REPO.glob(pattern)
                     if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return sorted(files)


def content_hash(include_package: bool = True, release_name: str = DEFAULT_RELEASE) -> str:
    """sha256 over (relative path, mode bit x, bytes) of every input file, in path order.

    Without the package sources (``include_package=False``) the hash covers the runtime
    only: Slurm, munge, sshd, the dependencies, the stand-in NVML, the hook scripts. The e2e
    suite uses that tag and bind-mounts the checkout's ``slurmguard/`` over the installed
    copy, so editing Python code does not cost a rebuild.
    """
    rel = release(release_name)
    h = hashlib.sha256()
    if rel.name != DEFAULT_RELEASE:
        h.update(f"release={rel.name} python={rel.python}\0".encode())
    for path in _inputs(include_package):
        h.update(str(path.relative_to(REPO)).encode() + b"\0")
        h.update(b"x" if os.access(path, os.X_OK) else b"-")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_tag(include_package: bool = True, release_name: str = DEFAULT_RELEASE) -> str:
    """``slurmguard-node:[<release>-][rt-]<hash>``; the default release has no prefix."""
    prefix = "" if release_name == DEFAULT_RELEASE else f"{release_name}-"
    prefix += "" if include_package else "rt-"
    return f"{IMAGE}:{prefix}{content_hash(include_package, release_name)}"


def latest_tag(release_name: str = DEFAULT_RELEASE) -> str:
    return f"{IMAGE}:latest" if release_name == DEFAULT_RELEASE else f"{IMAGE}:{release_name}"


def ensure_base_image(release_name: str = DEFAULT_RELEASE) -> None:
    """``debian:<release>``: present, or made by build-base-image.sh (debootstrap)."""
    rel = release(release_name)
    if not image_exists(f"debian:{rel.name}"):
        _run([str(HERE / "build-base-image.sh"), rel.name])


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def _run(argv: list[str], **kw: object) -> None:
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]


_WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-"
                       r"(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def retarget_wheels(wheels: Path, python: str, find_links: list[str]) -> None:
    """Replace each wheel compiled for the host's Python by the same version built for
    ``python`` (``3.13``); pure (``none``) and stable-ABI (``abi3``) wheels serve both."""
    host = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python == host:
        return
    cp = "cp" + python.replace(".", "")
    machine = platform.machine()
    for whl in sorted(wheels.glob("*.whl")):
        m = _WHEEL_RE.match(whl.name)
        if not m:
            raise SystemExit(f"build_image: wheel: cannot read the file name {whl.name!r}")
        if m["abi"] in ("none", "abi3"):
            continue
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--abi", cp, "--dest", str(wheels)]
        for plat in ("manylinux2014", "manylinux_2_17", "manylinux_2_28", "manylinux_2_34"):
            pip += ["--platform", f"{plat}_{machine}"]
        for link in find_links:
            pip += ["--find-links", link]
        _run([*pip, f"{m['name']}=={m['version']}"])
        whl.unlink()


def assemble_context(ctx: Path, find_links: list[str],
                     release_name: str = DEFAULT_RELEASE) -> None:
    """Fill CTX with what the Dockerfile copies from ctx/."""
    inner = ctx / "ctx"
    inner.mkdir(parents=True)
    shutil.copy2(HERE / "Dockerfile", ctx / "Dockerfile")
    for name in DOCKER_FILES[1:]:
        shutil.copy2(HERE / name, inner / name)
    # Wheels from a clean copy of the package: setuptools reuses a build/ directory in the
    # source tree, which could smuggle deleted modules into the wheel.
    src = ctx / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "slurmguard", src / "slurmguard",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", f"{src}[server]",
           "--wheel-dir", str(inner / "wheels")]
    for link in find_links:
        pip += ["--find-links", link]
    _run(pip, cwd=str(ctx))
    retarget_wheels(inner / "wheels", release(release_name).python, find_links)
    shutil.rmtree(src)
    fakehw = inner / "fakehw"
    fakehw.mkdir()
    for name in FAKEHW_MODULES:
        if (FAKEHW / name).exists():
            shutil.copy2(FAKEHW / name, fakehw / name)
    if (FAKEHW / "libnvml.c").exists():
        # The suite's own build recipe (flags, soname) when it is there.
        sys.path.insert(0, str(REPO / "tests"))
        from fakehw.nvml import build_fake_nvml  # type: ignore[import-not-found]
        libdir = build_fake_nvml(ctx / "nvml-build")
        shutil.copy2(Path(libdir) / "libnvidia-ml.so.1", inner / "libnvidia-ml.so.1")
    hooks = inner / "hooks"
    for hook in ("prolog", "epilog"):
        (hooks / hook).mkdir(parents=True)
        if (REPO / hook).is_dir():
            for f in sorted((REPO / hook).iterdir()):
                if f.is_file():
                    shutil.copy2(f, hooks / hook / f.name)
    shutil.copytree(HERE / "etc", inner / "etc")


def build(force: bool = False, find_links: list[str] | None = None, quiet: bool = False,
          include_package: bool = True, release_name: str = DEFAULT_RELEASE) -> str:
    """Build the image unless its content tag exists; return the tag.

    ``include_package=False`` gives the runtime-tagged image of the e2e suite (see
    :func:`content_hash`); only full builds move ``slurmguard-node:latest`` (``:trixie``).
    ``release_name`` is the Debian release (:data:`RELEASES`); its base image is made
    with build-base-image.sh when missing.
    """
    rel = release(release_name)
    tag = image_tag(include_package, rel.name)
    tags = [tag, latest_tag(rel.name)] if include_package else [tag]
    if not force and image_exists(tag):
        if not quiet:
            print(f"build_image: {tag} exists; not rebuilding", file=sys.stderr)
        if include_package:
            _run(["docker", "tag", tag, latest_tag(rel.name)])
        return tag
    ensure_base_image(rel.name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slurmguard-ctx.") as tmp:
        ctx = Path(tmp)
        assemble_context(ctx, find_links or [], rel.name)
        argv = ["docker", "build", "--network", "host", "--force-rm",
                "--build-arg", f"DEBIAN_RELEASE={rel.name}",
                "--build-arg", f"PYTHON_VERSION={rel.python}"]
        for t in tags:
            argv += ["-t", t]
        _run([*argv, str(ctx)], stdout=sys.stderr if quiet else None)
    print(f"build_image: built {tag} in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return tag


SITE_IMAGE = "slurmguard-site"
HOST_CA = Path(os.environ.get("SLURMGUARD_HOST_CA", "/etc/ssl/certs/ca-certificates.crt"))


def readme_command(readme: Path = REPO / "README.md") -> str:
    """The README's first set-up command (the first line of its first code block)."""
    lines = readme.read_text().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("```"))
        return lines[start + 1].strip()
    except (StopIteration, IndexError):
        raise SystemExit(f"build_image: {readme}: no code block with the set-up command") from None


# Not needed by the README's install command (and edited far more often than the package).
_SITE_SKIP = ("tests/", "docs/", "docker-slurm/", ".git")


def _checkout_files() -> list[Path]:
    """The working tree as git sees it (tracked files and untracked ones not ignored), less
    the tests, docs and images: what a clone gives the README's install command."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    return sorted(REPO / f for f in out.decode().split("\0")
                  if f and not f.startswith(_SITE_SKIP)
                  and ((REPO / f).is_symlink() or (REPO / f).is_file()))


def site_tag(release_name: str = DEFAULT_RELEASE) -> str:
    """``slurmguard-site:<release>-<hash>`` over the site Dockerfile and the checkout."""
    rel = release(release_name)
    h = hashlib.sha256(f"site release={rel.name}\0".encode())
    for path in [HERE / "site" / "Dockerfile", *_checkout_files()]:
        h.update(str(path.relative_to(REPO)).encode() + b"\0")
        if path.is_symlink():  # slurmguard/data/hooks/* -> prolog/, epilog/: the link itself
            h.update(b"l" + os.readlink(path).encode() + b"\0")
            continue
        h.update(b"x" if os.access(path, os.X_OK) else b"-")
        h.update(path.read_bytes() + b"\0")
    return f"{SITE_IMAGE}:{rel.name}-{h.hexdigest()[:12]}"


def build_site(release_name: str = DEFAULT_RELEASE, force: bool = False,
               quiet: bool = False) -> str:
    """A fresh Debian with Debian's Slurm on which the README's first command has run, in a
    copy of this checkout (docker-slurm/site/Dockerfile); return the tag. pip there trusts
    the host's CA bundle (``$SLURMGUARD_HOST_CA``, default Debian's), through PIP_CERT."""
    rel = release(release_name)
    tag = site_tag(rel.name)
    if not force and image_exists(tag):
        return tag
    ensure_base_image(rel.name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slurmguard-site.") as tmp:
        ctx = Path(tmp)
        shutil.copy2(HERE / "site" / "Dockerfile", ctx / "Dockerfile")
        ca = ctx / "root/usr/local/share/slurmguard-site/host-ca.crt"
        ca.parent.mkdir(parents=True)
        shutil.copyfile(HOST_CA, ca)
        for f in _checkout_files():
            dst = ctx / "root/root/slurmguard" / f.relative_to(REPO)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if f.is_symlink():  # kept a link, as a clone has it (package data -> hook dirs)
                os.symlink(os.readlink(f), dst)
            else:
                shutil.copy2(f, dst)
        _run(["docker", "build", "--network", "host", "--force-rm", "-t", tag,
              "--build-arg", f"DEBIAN_RELEASE={rel.name}",
              "--build-arg", f"README_COMMAND={readme_command()}", str(ctx)],
             stdout=sys.stderr if quiet else None)
    print(f"build_image: built {tag} in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return tag


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="build even if the tag exists")
    ap.add_argument("--find-links", action="append", default=[], metavar="DIR",
                    help="extra wheel directory for pip (offline sites)")
    ap.add_argument("--print-tag", action="store_true", help="only print the tag")
    ap.add_argument("--runtime", action="store_true",
                    help="tag by the runtime only (the e2e suite's image; see content_hash)")
    ap.add_argument("--release", default=DEFAULT_RELEASE, choices=sorted(RELEASES),
                    help="Debian release: bookworm (Slurm 22.05, default), trixie (24.11) "
                         "or forky (26.05)")
    ap.add_argument("--site", action="store_true",
                    help="the install-test image instead: a fresh Debian with Debian's Slurm "
                         "and the README's first command run (docker-slurm/site/)")
    args = ap.parse_args()
    if args.site:
        print(site_tag(args.release) if args.print_tag else build_site(args.release, args.force))
        return 0
    if args.print_tag:
        print(image_tag(not args.runtime, args.release))
        return 0
    print(build(args.force, args.find_links, include_package=not args.runtime,
                release_name=args.release))
    return 0


if __name__ == "__main__":
    sys.exit(main())
