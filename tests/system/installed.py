"""hubd installed in a booted container the README's way ("Raspberry Pi (systemd)"): a venv in /opt/hubd from
the host's wheels, `hubd init` with its secrets in /etc/credstore, the placeholders filled in, and the units
copied from the repository's systemd/ as they are. Imports nothing from hubd.
"""

from __future__ import annotations

from tests.system.podman import Container

CONFIG = "/etc/hubd/config.yaml"
GOOD_CONFIG = "/etc/hubd/config.yaml.good"  # what each test starts from
CREDSTORE = "/etc/credstore"
UNITS = "/unit"  # the repository's systemd/, mounted read-only
HUBD = "/opt/hubd/bin/hubd"
HTTP_PORT = 8080  # what `hubd init` writes
LOCAL_PORT = 8081
CLIENT_ID = "system-test"
INSTALL_TIMEOUT_S = 300.0

# The values only the user knows, as `hubd init` leaves them, and what the tests put there. Nothing listens
# on port 9: hubd is ready without the platform (it queues events for it).
PLACEHOLDERS = (
    ("public_url: https://CHANGE-ME.invalid", "public_url: https://hub.example.com"),
    ("base_url: https://CHANGE-ME.invalid", "base_url: http://127.0.0.1:9"),
    ("auth_url: https://CHANGE-ME.invalid", "auth_url: http://127.0.0.1:9"),
    ("client_id: CHANGE-ME", f"client_id: {CLIENT_ID}"),
)


def install_hubd(container: Container) -> None:
    """Install hubd from /wheels, write its config and secrets, install its unit (not started)."""
    run = container.run
    run(["python3", "-m", "venv", "/opt/hubd"])
    run(["/opt/hubd/bin/pip", "install", "-q", "--no-index", "--find-links", "/wheels", "hubd"],
        timeout_s=INSTALL_TIMEOUT_S)
    run(["install", "-d", "-m", "0755", "/etc/hubd"])
    run([HUBD, "init", "-c", CONFIG, "--secrets-dir", CREDSTORE])
    run(["sed", "-i", *(arg for old, new in PLACEHOLDERS for arg in ("-e", f"s#{old}#{new}#")), CONFIG])
    container.write(f"{CREDSTORE}/hubd.client-secret", "system-test-secret\n", mode="0600")
    run(["env", f"CREDENTIALS_DIRECTORY={CREDSTORE}", HUBD, "check-config", "-c", CONFIG])
    run(["cp", "-p", CONFIG, GOOD_CONFIG])
    install_unit(container, "hubd.service")


def install_unit(container: Container, name: str) -> None:
    """Copy a unit from the repository's systemd/ into /etc/systemd/system, unchanged, and reload systemd."""
    container.run(["install", "-m", "0644", f"{UNITS}/{name}", f"/etc/systemd/system/{name}"])
    container.run(["systemctl", "daemon-reload"])
    verify = container.run(["systemd-analyze", "verify", f"/etc/systemd/system/{name}"], check=False)
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stdout + verify.stderr
