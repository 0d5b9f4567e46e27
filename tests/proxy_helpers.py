"""Test helpers for `hubd doctor`: a private CA made with the openssl CLI (certificates for any name, valid for
any span, expired ones too), a real Caddy reverse proxy on a free loopback port with a Caddyfile the test
writes, the Caddyfile of docs/reverse-proxy.md, and running `hubd doctor` as a subprocess.

Caddy is Debian's `caddy` package (.ci/run installs it); it runs with its data and config directories in the
test's temporary directory and its admin endpoint off.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hubd_proc import HubdProcess, free_port

from hubd.driver.passwords import hash_password

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 15.0
DAY_S = 86400.0
_CA_CONFIG = """[ ca ]
default_ca = test_ca
[ test_ca ]
database = {dir}/index.txt
new_certs_dir = {dir}/issued
serial = {dir}/serial
default_md = sha256
policy = any_name
unique_subject = no
email_in_dn = no
[ any_name ]
commonName = supplied
"""


@dataclass(frozen=True)
class Certificate:
    """A certificate and its key, in PEM files."""

    cert_file: Path
    key_file: Path


class PrivateCA:
    """A throw-away CA: trust it with SSL_CERT_FILE=ca_file; `issue` signs a server certificate."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "issued").mkdir(parents=True, exist_ok=True)
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("1000\n")
        self.config = directory / "ca.cnf"
        self.config.write_text(_CA_CONFIG.format(dir=directory))
        self.key_file, self.ca_file = directory / "ca.key", directory / "ca.crt"
        _openssl("req", "-x509", *_NEW_KEY, "-days", "30", "-subj", "/O=hubd test CA/CN=hubd test CA",
                 "-keyout", self.key_file, "-out", self.ca_file)
        self._count = 0

    def issue(self, name: str, *, not_before_s: float = -DAY_S, not_after_s: float = 90 * DAY_S) -> Certificate:
        """A certificate for `name` (a DNS name), valid from now + not_before_s to now + not_after_s."""
        self._count += 1
        stem = self.directory / f"leaf{self._count}"
        key, csr, crt, ext = (stem.with_suffix(s) for s in (".key", ".csr", ".crt", ".ext"))
        ext.write_text(f"subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        _openssl("req", "-new", *_NEW_KEY, "-subj", f"/CN={name}", "-keyout", key, "-out", csr)
        now = time.time()
        _openssl("ca", "-batch", "-notext", "-config", self.config, "-cert", self.ca_file, "-keyfile", self.key_file,
                 "-in", csr, "-out", crt, "-extfile", ext, "-startdate", _asn1_time(now + not_before_s),
                 "-enddate", _asn1_time(now + not_after_s))
        return Certificate(crt, key)


_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")


def _asn1_time(epoch: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(epoch))


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def start_with_private_secrets(hub: HubdProcess) -> None:
    """Start hubd as an installation keeps its secrets: the client secret in a file of its own (mode 0600), the
    login passwords hashed (a `start` for make_rig)."""
    platform = hub.config["platform"]
    secret_file = hub.workdir / "client-secret"
    secret_file.write_text(platform.pop("client_secret") + "\n")
    secret_file.chmod(0o600)
    platform["client_secret_file"] = str(secret_file)
    for account in hub.config["driver"]["accounts"]:
        account["password"] = hash_password(account["password"])
    hub.start()


def docs_caddyfile() -> str:
    """The Caddyfile docs/reverse-proxy.md gives for Caddy with a port forward (its block for hub.example.com)."""
    text = (REPO / "docs" / "reverse-proxy.md").read_text(encoding="utf-8")
    section = text.split("## Caddy with a port forward", 1)[1]
    match = re.search(r"```caddyfile\n(hub\.example\.com \{\n.*?\n\})\n```", section, re.DOTALL)
    assert match, "docs/reverse-proxy.md has no Caddyfile for hub.example.com under 'Caddy with a port forward'"
    return match.group(1)


def docs_expected_output(heading: str) -> list[tuple[str, str]]:
    """The (verdict, check) pairs of the doctor output docs/reverse-proxy.md shows under `heading`."""
    text = (REPO / "docs" / "reverse-proxy.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```text\n(.*?)\n```", section.split("hubd doctor", 1)[1], re.DOTALL)
    assert match, f"docs/reverse-proxy.md shows no doctor output under {heading!r}"
    return [(line.split()[0], line.split()[1].rstrip(":")) for line in match.group(1).splitlines()
            if line.split() and line.split()[0] in ("PASS", "WARN", "FAIL")]


def for_test(caddyfile: str, *, name: str, hub: HubdProcess, cert: Certificate) -> str:
    """A Caddyfile of the docs made to run here: the site on `name` (host:port), hubd's port for 127.0.0.1:8080,
    the test CA's certificate instead of Let's Encrypt, bound to loopback only."""
    site = caddyfile.replace("hub.example.com", name, 1).replace("127.0.0.1:8080", f"127.0.0.1:{hub.http_port}")
    first, rest = site.split("\n", 1)
    return f"{first}\n\ttls {cert.cert_file} {cert.key_file}\n\tbind 127.0.0.1\n{rest}"


class Caddy:
    """Caddy running one Caddyfile (global options added: no admin endpoint, no saved config, no ACME)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "caddy.log"

    @property
    def name(self) -> str:
        """The site address the proxy serves: localhost and its port."""
        return f"localhost:{self.port}"

    async def start(self, site: str) -> None:
        """Write the Caddyfile and run Caddy; return once it completes TLS handshakes on its port."""
        self.directory.mkdir(parents=True, exist_ok=True)
        caddyfile = self.directory / "Caddyfile"
        caddyfile.write_text("{\n\tadmin off\n\tauto_https disable_redirects\n"
                             f"\tstorage file_system {self.directory / 'data'}\n}}\n\n{site}\n")
        env = {**os.environ, "HOME": str(self.directory), "XDG_DATA_HOME": str(self.directory / "data"),
               "XDG_CONFIG_HOME": str(self.directory / "config")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([caddy_binary(), "run", "--config", str(caddyfile), "--adapter", "caddyfile"],
                                         cwd=self.directory, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"caddy exited with {self.proc.returncode}:\n{self.log()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=context,
                                                          server_hostname="localhost")
            except (OSError, ssl.SSLError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"caddy not serving TLS on {self.port}:\n{self.log()}") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return

    def stop(self) -> None:
        """SIGTERM and reap (SIGKILL if it lingers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log(self) -> str:
        """What Caddy printed."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def caddy_binary() -> str:
    """The caddy executable (Debian's package)."""
    found = shutil.which("caddy") or ("/usr/bin/caddy" if Path("/usr/bin/caddy").exists() else None)
    if found is None:
        raise RuntimeError("caddy is not installed: sudo apt-get install caddy (.ci/run installs it)")
    return found


@dataclass
class DoctorRun:
    """What `hubd doctor` printed, and its exit code."""

    code: int
    lines: list[str]

    @property
    def verdicts(self) -> dict[str, str]:
        """check -> PASS, WARN or FAIL."""
        return {line.split()[1].rstrip(":"): line.split()[0] for line in self.lines}

    def line(self, check: str) -> str:
        """The line of one check."""
        return next(line for line in self.lines if line.split()[1].rstrip(":") == check)

    def __repr__(self) -> str:
        return f"exit {self.code}\n" + "\n".join(self.lines)


async def run_doctor(config: Path, *, ca_file: Path | None = None, timeout_s: float = 60.0) -> DoctorRun:
    """`hubd doctor -c CONFIG` in a subprocess (the test's loop keeps serving the platform simulator meanwhile),
    trusting `ca_file` through SSL_CERT_FILE."""
    env = {**os.environ}
    if ca_file is not None:
        env["SSL_CERT_FILE"] = str(ca_file)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "hubd", "doctor", "-c", str(config), env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    lines = out.decode().splitlines()
    assert proc.returncode is not None
    assert all(line.split()[0] in ("PASS", "WARN", "FAIL") for line in lines), f"{out.decode()}\n{err.decode()}"
    return DoctorRun(proc.returncode, lines)
