"""Admin commands on a `hubd init` config work as the README shows them, without CREDENTIALS_DIRECTORY: those that
use no secret read none (not even a `${VAR}` they would need), and `hubd run` and `check-config` find the secrets
where `hubd init` put them (a credential store, or next to the config) or say where they looked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from backup_helpers import CLIENT_SECRET, clean_env, fill_init_config, hubd, installation, ok
from hubd_proc import HubdProcess
from mosquitto import Mosquitto

from hubd.config.model import load_config
from hubd.config.yamlfile import UnreadSecret
from hubd.errors import HubdError
from simulators.platform import PlatformSimulator
from simulators.platform_binding import bind_user


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """An init config whose secrets are where hubd does not look, and a broker password from a variable that is
    not set: every secret out of reach of a command typed by hand."""
    path = installation(tmp_path / "pi", secrets_dir=tmp_path / "elsewhere")
    text = path.read_text().replace("  # username: hubd ", "  username: hubd\n  password: ${MQTT_PASSWORD}\n  #")
    assert "password: ${MQTT_PASSWORD}" in text
    path.write_text(text)
    return path


def test_admin_commands_read_no_secret(config: Path, tmp_path: Path) -> None:
    cfg = str(config)
    assert ok("db-migrate", "-c", cfg).startswith("ok: ")
    hook = json.loads(ok("webhook", "create", "-c", cfg, "--name", "kitchen-automation"))
    assert hook["url"].startswith("http://127.0.0.1:8081/trigger/with/whk_")
    assert "kitchen-automation" in ok("webhook", "list", "-c", cfg)
    assert json.loads(ok("webhook", "rotate", "-c", cfg, str(hook["id"])))["token"] != hook["token"]
    assert "revoked webhook" in ok("webhook", "revoke", "-c", cfg, "kitchen-automation")
    assert ok("grants", "list", "-c", cfg) == "no platform user has bound this hub\n"
    assert ok("tokens", "list", "-c", cfg) == "no tokens issued\n"
    assert ok("tokens", "-c", cfg, "list") == "no tokens issued\n"
    backup = tmp_path / "b.tar.gz"
    assert "left out the secrets" in ok("backup", "-c", cfg, str(backup))
    assert "restored the database" in ok("restore", "-c", cfg, "--force", str(backup))
    for args, said in ((("grants", "remove", "-c", cfg, "user-1"), "no grant for platform user 'user-1'"),
                       (("tokens", "revoke", "-c", cfg, "owner"), "no live tokens for 'owner'")):
        done = hubd(*args)
        assert (done.returncode, said in done.stderr) == (1, True), done.stderr  # their own answer, no config error


def test_the_commands_that_use_the_secrets_say_where_they_looked(config: Path, tmp_path: Path) -> None:
    for command in ("check-config", "run"):
        done = hubd(command, "-c", str(config))
        assert done.returncode == 2, done.stderr
        assert "mqtt.password: environment variable MQTT_PASSWORD is not set" in done.stderr
        assert ("platform.client_secret_file: environment variable CREDENTIALS_DIRECTORY is not set, and "
                "hubd.client-secret is in none of the directories hubd looks in instead (/etc/credstore, "
                f"/run/credstore, /usr/lib/credstore, {config.parent}); systemd sets it") in done.stderr
    env = clean_env(CREDENTIALS_DIRECTORY=str(tmp_path / "elsewhere"), MQTT_PASSWORD="pw")
    done = hubd("check-config", "-c", str(config), env=env)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_a_secret_not_read_cannot_be_used_by_mistake(config: Path) -> None:
    loaded = load_config(config, env={}, secrets=False)
    assert isinstance(loaded.platform.client_secret, UnreadSecret)
    assert isinstance(loaded.mqtt.password, UnreadSecret)
    with pytest.raises(HubdError, match=r"platform\.client_secret: this command reads no secret"):
        loaded.platform.client_secret.get_secret_value()
    (account,) = loaded.driver.accounts
    with pytest.raises(HubdError, match=r"driver\.accounts\[0\]\.password: this command reads no secret"):
        account.password.get_secret_value()
    assert str(loaded.platform.client_secret) == "**********"  # and never printed


def test_init_next_to_the_config_needs_nothing_set(tmp_path: Path) -> None:
    config = tmp_path / "hubd" / "config.yaml"
    out = ok("init", "-c", str(config))
    assert f"\n  hubd check-config -c {config}\n" in out
    fill_init_config(config, config.parent / "hubd.client-secret")
    assert ok("check-config", "-c", str(config)) == "ok\n"
    loaded = load_config(config, env={})
    assert loaded.platform.client_secret is not None
    assert loaded.platform.client_secret.get_secret_value() == CLIENT_SECRET


async def test_hubd_run_on_an_init_config_reads_its_secrets_without_credentials_directory(
        tmp_path: Path, mosquitto: Mosquitto, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    workdir = tmp_path / "hub"
    config = workdir / "config.yaml"
    ok("init", "-c", str(config))  # the secrets next to the config
    fill_init_config(config, workdir / "hubd.client-secret")
    written = yaml.safe_load(config.read_text())
    assert written["platform"]["client_secret_file"] == "${CREDENTIALS_DIRECTORY}/hubd.client-secret"
    async with PlatformSimulator(client_id="abc123", client_secret=CLIENT_SECRET) as sim:
        # The init config as it is, but for where things listen on this test machine.
        del written["http"], written["mqtt"]
        written["platform"].update(base_url=sim.url, auth_url=sim.url)
        written["zeroconf"] = {"enabled": False}
        hub = HubdProcess(workdir, mqtt_port=mosquitto.port, overrides=written)
        hub.start()
        try:
            await hub.wait_ready()
            # Binding exchanges the platform's code with the client secret from the file: the platform checks it.
            bound = await bind_user(hub_url=hub.url, vendor_path="/vendor", sim=sim, username="owner",
                                    password=(workdir / "hubd.login-password").read_text().strip(), user_id="user-1")
            assert bound.ok, bound.reply
            assert [(t.grant_type, t.status) for t in sim.token_requests] == [("authorization_code", 200)]
        finally:
            assert hub.stop() == 0, hub.log()
