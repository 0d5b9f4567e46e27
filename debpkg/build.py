"""Build hubd's Debian package for one architecture: `python -m debpkg.build --arch arm64` (docs/packaging.md).

Nothing is compiled on the Pi: the package carries hubd's wheel and a binary wheel of every dependency for
the target (`pip download --only-binary=:all:` for bookworm's Python 3.11 and glibc 2.36), resolved here, and
its postinst makes /usr/lib/hubd/venv from them with `--no-index --no-deps`. Two exceptions, both decided by
what PyPI has for 32-bit ARM (armhf, `linux_armv7l`):

- PyYAML publishes no armv7 wheel: its sdist is built here into a pure-Python wheel (`PYYAML_FORCE_LIBYAML=0`;
  hubd reads one small config file, so the C loader buys nothing). Chosen over Debian's python3-yaml with a
  `--system-site-packages` venv, which would let every Debian Python module into hubd's venv.
- amqtt (the embedded broker of `hubd demo` and `mqtt.embedded`) requires psutil and pwdlib[argon2]
  (argon2-cffi-bindings, cffi), which it uses only in its `$SYS` and password plugins, neither of which
  hubd loads, and which have no armv7 wheel: the armhf package leaves them out (`--no-deps` at install).

Built with dpkg-deb alone (no debhelper): the tree is written here, owned by root in the archive.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
TARGET_PYTHON = "3.11"  # bookworm's
TARGET_GLIBC_MINOR = 36  # bookworm's glibc 2.36
PIP_TIMEOUT_S = 900.0
VENV = "/usr/lib/hubd/venv"
UNITS = ("hubd.service", "hubd-backup.service", "hubd-backup.timer", "hubd-speaker.service")
BUILD_FILES = ("pyproject.toml", "README.md", "hubd", "simulators")
PYYAML_SDIST = "pyyaml==6.0.2"  # the newest release whose sdist builds a pure wheel with setuptools alone
MAINTAINER = "hubd maintainers <hubd@example.com>"
HOMEPAGE = "https://github.com/example/hubd"


@dataclass(frozen=True, slots=True)
class Arch:
    """A Debian architecture and what PyPI calls it."""

    debian: str
    machine: str  # the manylinux platform suffix
    pure_wheels: tuple[str, ...] = ()  # built here from their sdist, without C
    left_out: tuple[str, ...] = ()  # required by a dependency, never imported by hubd, no wheel for this arch
    syscall_arch: str = ""  # systemd's name for this userland where a 64-bit kernel may run it


ARCHES = {
    "amd64": Arch("amd64", "x86_64"),
    "arm64": Arch("arm64", "aarch64"),
    "armhf": Arch("armhf", "armv7l", pure_wheels=(PYYAML_SDIST,),
                  left_out=("psutil", "argon2-cffi", "argon2-cffi-bindings", "cffi", "pycparser"), syscall_arch="arm"),
}


def platform_tags(machine: str) -> list[str]:
    """The platform tags pip may take for bookworm on `machine`."""
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(TARGET_GLIBC_MINOR, 16, -1)]
    tags.append(f"manylinux2014_{machine}")
    if machine == "x86_64":
        tags += ["manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
    if machine == "armv7l":
        tags.append("linux_armv7l")  # piwheels' and some projects' tag
    return tags


def _run(argv: list[str], *, what: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False, cwd=cwd,
                            env=None if env is None else {**os.environ, **env})
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-3000:]
        raise SystemExit(f"debpkg: {what} failed (exit {result.returncode}):\n{output}")
    print(f"debpkg: {what}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return result.stdout


def hubd_version() -> str:
    """hubd's version, from hubd/__init__.py (the wheel's)."""
    for line in (REPO / "hubd" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit("debpkg: no __version__ in hubd/__init__.py")


def build_hubd_wheel(out: Path, source: Path) -> Path:
    """hubd's own wheel in `out`, built from a clean copy (in `source`, made afresh) of what it is made of: no venv,
    caches or tests of the checkout get in. The system tests build theirs with it too."""
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for name in BUILD_FILES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)], what="hubd's wheel")
    shutil.rmtree(source)
    (wheel,) = out.glob("hubd-*.whl")
    return wheel


def build_wheels(out: Path, arch: Arch, work: Path) -> list[Path]:
    """hubd's wheel and its dependencies' for `arch` in `out`."""
    out.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    hubd_wheel = build_hubd_wheel(out, work / "source")
    extra = work / "pure"
    extra.mkdir()
    if arch.pure_wheels and importlib.util.find_spec("wheel") is None:
        raise SystemExit("debpkg: building pure-Python wheels needs the `deb` extra: pip install -e '.[deb]'")
    for spec in arch.pure_wheels:
        _run([*pip, "download", "-q", "--no-deps", "--no-binary=:all:", "--no-build-isolation", "-d", str(extra),
              spec], what=f"{spec}'s sdist", env={"PYYAML_FORCE_LIBYAML": "0"})
        (sdist,) = extra.glob(f"{spec.split('==')[0]}-*.tar.gz")
        _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(sdist)],
             what=f"{spec}: a pure-Python wheel", env={"PYYAML_FORCE_LIBYAML": "0"})
        sdist.unlink()
    platforms = [arg for tag in platform_tags(arch.machine) for arg in ("--platform", tag)]
    target = ["--only-binary=:all:", "--python-version", TARGET_PYTHON, "--implementation", "cp", *platforms]
    if not arch.left_out:
        _run([*pip, "download", "-q", *target, "--find-links", str(out), "-d", str(out), str(hubd_wheel)],
             what=f"the dependencies' wheels for {arch.machine}")
    else:
        # Resolve the set as for aarch64 (the same versions: every requirement here is platform-independent),
        # then fetch each for this platform by itself, leaving out what cannot be had and is never imported.
        names = _resolve(hubd_wheel, work / "resolve")
        left = set(arch.left_out)
        have = {w.name.split("-")[0].lower().replace("_", "-") for w in out.glob("*.whl")}
        for name, version in names:
            if name in left or name in have:
                continue
            _run([*pip, "download", "-q", "--no-deps", *target, "-d", str(out), f"{name}=={version}"],
                 what=f"{name} {version} for {arch.machine}")
    return sorted(out.glob("*.whl"))


def _resolve(hubd_wheel: Path, where: Path) -> list[tuple[str, str]]:
    """hubd's dependencies, (name, version) each, resolved for bookworm on aarch64."""
    platforms = [arg for tag in platform_tags("aarch64") for arg in ("--platform", tag)]
    _run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", TARGET_PYTHON,
          "--implementation", "cp", *platforms, "-d", str(where), str(hubd_wheel)], what="resolve the dependencies")
    found = []
    for wheel in where.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        name = name.lower().replace("_", "-")
        if name != "hubd":
            found.append((name, version))
    return sorted(found)


def _unit_text(name: str, arch: Arch) -> str:
    """The repository's unit, run from the package's venv; on armhf, 32-bit ARM system calls allowed too."""
    text = (REPO / "systemd" / name).read_text().replace("/opt/hubd/bin/hubd", f"{VENV}/bin/hubd")
    if arch.syscall_arch:
        # A 32-bit userland on a 64-bit kernel (Raspberry Pi OS's armhf on a Pi 3, 4 or 5 boots arm64 kernels):
        # `native` is the kernel's arm64, and the first 32-bit system call would kill hubd (SIGSYS).
        text = text.replace("SystemCallArchitectures=native\n",
                            f"SystemCallArchitectures=native {arch.syscall_arch}\n")
    return text


def _mosquitto_conf() -> Path:
    return REPO / "systemd" / "mosquitto-hubd.conf"


def build_tree(root: Path, arch: Arch, version: str, wheels: list[Path]) -> None:
    """The package's files under `root` (DEBIAN/ included)."""
    lib = root / "usr" / "lib" / "hubd" / "wheels"
    lib.mkdir(parents=True)
    for wheel in wheels:
        shutil.copy2(wheel, lib / wheel.name)
        (lib / wheel.name).chmod(0o644)
    units = root / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in UNITS:
        (units / unit).write_text(_unit_text(unit, arch))
    bin_dir = root / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "hubd").write_text(f'#!/bin/sh\nexec {VENV}/bin/hubd "$@"\n')
    (bin_dir / "hubd").chmod(0o755)
    share = root / "usr" / "share" / "hubd"
    share.mkdir(parents=True)
    shutil.copy2(_mosquitto_conf(), share / "mosquitto-hubd.conf")
    for example in ("config.example.yaml", "speaker.example.yaml"):
        shutil.copy2(REPO / example, share / example)
    doc = root / "usr" / "share" / "doc" / "hubd"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(_copyright(wheels))
    (doc / "README.Debian").write_text((HERE / "README.Debian").read_text())
    when = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
    changelog = (f"hubd ({version}) bookworm; urgency=medium\n\n  * Built by debpkg.build from hubd "
                 f"{hubd_version()}.\n\n -- {MAINTAINER}  {when}\n")
    with gzip.GzipFile(doc / "changelog.Debian.gz", "wb", mtime=0, compresslevel=9) as gz:
        gz.write(changelog.encode())
    overrides = root / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    (overrides / "hubd").write_text((HERE / "lintian-overrides").read_text())
    (root / "etc" / "hubd").mkdir(parents=True)
    control = root / "DEBIAN"
    control.mkdir()
    for script in ("postinst", "prerm", "postrm"):
        shutil.copy2(HERE / "scripts" / script, control / script)
        (control / script).chmod(0o755)
    size_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) // 1024 + 1
    (control / "control").write_text(
        f"Package: hubd\nVersion: {version}\nArchitecture: {arch.debian}\nMaintainer: {MAINTAINER}\n"
        f"Installed-Size: {size_kib}\nDepends: python3 (>= 3.11), python3-venv\n"
        "Recommends: mosquitto\nSection: net\nPriority: optional\n"
        f"Homepage: {HOMEPAGE}\n"
        "Description: smart-home hub daemon: MQTT devices to a smart-speaker platform\n"
        " hubd takes the devices on an MQTT bus (its own topics, Home Assistant\n"
        " discovery, zigbee2mqtt, Tasmota) and puts them on the smart-speaker\n"
        " platform, with a durable outbox in SQLite.\n"
        " .\n"
        " After installing, run `sudo hubd setup`.\n")
    # Run from the root: md5sums of every file outside DEBIAN/.
    sums = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "DEBIAN" not in p.relative_to(root).parts):
        sums.append(f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.relative_to(root)}\n")  # noqa: S324
    (control / "md5sums").write_text("".join(sums))
    executables = {control / "postinst", control / "prerm", control / "postrm", bin_dir / "hubd"}
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() or path in executables else 0o644)


def _copyright(wheels: list[Path]) -> str:
    bundled = "\n".join(f" {w.name}" for w in wheels)
    return ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
            "Upstream-Name: hubd\n\nFiles: *\nCopyright: Copyright 2026 hubd contributors\nLicense: MIT\n\n"
            "Files: usr/lib/hubd/wheels/*\nCopyright: their authors (each wheel's METADATA names them)\n"
            "License: various-free\n Each wheel carries its license in its .dist-info. The wheels:\n"
            f"{bundled}\n\n"
            "License: MIT\n Permission is hereby granted, free of charge, to any person obtaining a copy of this\n"
            " software and associated documentation files, to deal in the Software without restriction.\n"
            "\nLicense: various-free\n See each wheel's .dist-info.\n")


def build(arch_name: str, *, out: Path, revision: str = "1") -> Path:
    """The .deb for `arch_name` in `out`; its path."""
    arch = ARCHES[arch_name]
    version = f"{hubd_version()}-{revision}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"hubd-deb-{arch_name}-") as tmp:
        work = Path(tmp)
        wheels = build_wheels(work / "wheels", arch, work)
        root = work / "root"
        build_tree(root, arch, version, wheels)
        deb = out / f"hubd_{version}_{arch.debian}.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)], what="dpkg-deb")
    return deb


def main(argv: list[str] | None = None) -> int:
    """`python -m debpkg.build --arch ARCH [--revision N] [--out DIR]`."""
    parser = argparse.ArgumentParser(prog="python -m debpkg.build", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=sorted(ARCHES), action="append", required=True,
                        help="a Debian architecture (repeat for several)")
    parser.add_argument("--revision", default="1", help="the Debian revision: hubd_<version>-<revision> (default 1)")
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the .deb goes (default dist/)")
    args = parser.parse_args(argv)
    for arch in args.arch:
        deb = build(arch, out=args.out, revision=args.revision)
        print(f"{deb} ({deb.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
