"""The command line (docs/cli.md): parse arguments, load config, call into hubd.

Each subcommand imports what it needs lazily, so `hubd check-config` stays fast on a Pi.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hubd import __version__
from hubd.config.model import HubdConfig, load_config
from hubd.errors import ConfigError, HubdError
from hubd.webhook.redact import RedactTokens

DEFAULT_CONFIG = "/etc/hubd/config.yaml"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `hubd` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code: int = args.handler(args)
    except ConfigError as err:
        for problem in err.problems:
            print(problem, file=sys.stderr)
        return 2
    except HubdError as err:
        print(f"hubd: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hubd", description="Smart-home hub daemon.")
    parser.add_argument("--version", action="version", version=f"hubd {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    def config_arg(p: argparse.ArgumentParser, *, action: bool = False) -> None:
        # On an action (`hubd tokens list -c C`) as well as on its group (`hubd tokens -c C list`):
        # the action's option has no default, so it does not overwrite the group's value.
        p.add_argument("-c", "--config", default=argparse.SUPPRESS if action else DEFAULT_CONFIG, type=Path,
                       help=f"the YAML config file (default {DEFAULT_CONFIG})")

    p = sub.add_parser("run", help="run the daemon in the foreground")
    config_arg(p)
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default=None,
                   help="overrides log.level of the config file")
    p.set_defaults(handler=_run)

    p = sub.add_parser("init", help="write a config for a real installation, its secrets in files (mode 0600)")
    config_arg(p)
    p.add_argument("--secrets-dir", type=Path, default=None,
                   help="where the secret files go (default: next to the config; under systemd: /etc/credstore)")
    p.add_argument("--storage", type=Path, default=None,
                   help="the database (default: /var/lib/hubd/hubd.db for a config under /etc, else next to it)")
    p.set_defaults(handler=_init)

    p = sub.add_parser("setup", help="after installing the package (as root): ask what only you know, write the config "
                                     "and its secrets, start hubd, run hubd doctor")
    config_arg(p)
    p.add_argument("--secrets-dir", type=Path, default=Path("/etc/credstore"),
                   help="where the secret files go (default /etc/credstore, where the unit's LoadCredential= looks)")
    for flag, what in (("--public-url", "hubd's public https URL"), ("--base-url", "the platform's event API URL"),
                       ("--auth-url", "the platform's OAuth token host URL"), ("--client-id", "the clientId"),
                       ("--mqtt-host", "the broker's host"), ("--mqtt-port", "the broker's port"),
                       ("--mqtt-username", "the broker's username (\"\": none, anonymous)")):
        p.add_argument(flag, default=None, help=f"{what} (not asked)")
    p.add_argument("--client-secret-file", type=Path, default=None, help="a file holding the clientSecret (not asked)")
    p.add_argument("--password-file", type=Path, default=None,
                   help="a file holding the owner's new login password (not asked)")
    p.add_argument("--mqtt-password-file", type=Path, default=None,
                   help="a file holding the broker's password for --mqtt-username (not asked)")
    p.add_argument("--yes", action="store_true",
                   help="ask nothing: keep every value not given by an option (each must be set already)")
    p.add_argument("--no-start", action="store_true", help="write and check the config, start nothing")
    p.add_argument("--start-anyway", action="store_true",
                   help="start hubd even when the broker refuses its login (setup tries it first)")
    p.set_defaults(handler=_setup)

    p = sub.add_parser("check-config", help="validate a config file: prints ok, or one line per problem")
    config_arg(p)
    p.set_defaults(handler=_check_config)

    p = sub.add_parser("doctor", help="check the whole chain (config, database, broker, platform, public URL); "
                                      "one PASS/WARN/FAIL line per check")
    config_arg(p)
    p.set_defaults(handler=_doctor)

    p = sub.add_parser("db-migrate", help="create or upgrade the database, then exit")
    config_arg(p)
    p.set_defaults(handler=_db_migrate)

    p = sub.add_parser("backup", help="write the database (a consistent copy, hubd may run), the config and, if "
                                      "asked, the secrets into one file; prints its path and size")
    config_arg(p)
    p.add_argument("file", metavar="FILE", help="the new file, or a directory (existing, or ending in /) to write "
                                                "hubd-backup-<UTC time>.tar.gz into")
    p.add_argument("--with-secrets", action="store_true",
                   help="include the secret files the config names (and hubd init's login password)")
    p.add_argument("--keep", type=int, default=None, metavar="N",
                   help="with a directory: keep the newest N backups there, remove older ones")
    p.set_defaults(handler=_backup)

    p = sub.add_parser("restore", help="put a backup back (hubd stopped); refuses a newer database without --force")
    config_arg(p)
    p.add_argument("file", type=Path, metavar="FILE",
                   help="a file `hubd backup` wrote, or the copy hubd made before a migration")
    p.add_argument("--with-config", action="store_true",
                   help="also put the backup's config at -c CONFIG (a different one there is kept beside it)")
    p.add_argument("--secrets-dir", type=Path, default=None, metavar="DIR",
                   help="also put the backup's secret files into DIR (under systemd: /etc/credstore)")
    p.add_argument("--force", action="store_true",
                   help="replace a database newer than the backup (it is kept beside it)")
    p.set_defaults(handler=_restore)

    p = sub.add_parser("hash-password", help="print a password hash for driver.accounts (reads stdin if no arg)")
    p.add_argument("password", nargs="?", help="the password (omit to type it without echo)")
    p.set_defaults(handler=_hash_password)

    p = sub.add_parser("check-driver", help="run the platform's four driver checks against a driver")
    p.add_argument("driver_base_url", help="the driver's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--callback-url", required=True, help="the callbackURL to test with")
    p.add_argument("--username", default=None)
    p.add_argument("--password", default=None)
    p.set_defaults(handler=_check_driver)

    def group(name: str, summary: str) -> argparse._SubParsersAction[argparse.ArgumentParser]:
        p = sub.add_parser(name, help=summary)
        config_arg(p)
        return p.add_subparsers(metavar="ACTION", required=True)

    def action(actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str,
               handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=summary)
        config_arg(a, action=True)
        a.set_defaults(handler=handler)
        return a

    tokens = group("tokens", "list or revoke the user tokens hubd's driver issued")
    action(tokens, "list", "list issued tokens (never the secrets)", _tokens_list)
    action(tokens, "revoke", "revoke every token of a user", _tokens_revoke).add_argument("user")

    grants = group("grants", "list or remove the platform users hubd reports to (works with hubd running)")
    action(grants, "list", "list platform users: state, token times, undelivered events (never a token)",
           _grants_list)
    action(grants, "remove", "forget a platform user: their grant and undelivered events",
           _grants_remove).add_argument("user", help="the platform userId")

    webhook = group("webhook", "create, list, revoke or rotate webhook tokens (works with hubd running)")
    w = action(webhook, "create", "make a webhook; prints {id, name, token, url} once", _webhook_create)
    w.add_argument("--name", default="webhook", help="a label for `webhook list` (default: webhook)")
    w.add_argument("--default-action", default=None, metavar="JSON",
                   help="a trigger body run when the webhook is called without one, e.g. "
                        "'{\"type\": \"tts\", \"devices\": {\"isAll\": true}, \"data\": {\"text\": \"Ding dong\"}}'")
    action(webhook, "list", "list webhooks (never their tokens)", _webhook_list).add_argument(
        "--json", action="store_true", help="one JSON object per line")
    action(webhook, "revoke", "revoke a webhook: its URL answers 404 from now on", _webhook_revoke).add_argument(
        "id", help="the webhook's id (or its name)")
    action(webhook, "rotate", "give a webhook a new token; the old URL stops working at once",
           _webhook_rotate).add_argument("id", help="the webhook's id (or its name)")

    admin = group("admin-token", "create, list or revoke the owner's tokens for the devices API (works with hubd "
                                 "running)")
    a = action(admin, "create", "make an admin token; prints {id, name, token} once", _admin_token_create)
    a.add_argument("--name", default="admin", help="a label for `admin-token list` (default: admin)")
    action(admin, "list", "list admin tokens (never the tokens)", _admin_token_list).add_argument(
        "--json", action="store_true", help="one JSON object per line")
    action(admin, "revoke", "revoke an admin token: requests with it get 401 from now on",
           _admin_token_revoke).add_argument("id", help="the token's id (see admin-token list)")

    p = sub.add_parser("speaker", help="run the speaker agent: this machine's loudspeaker as a speaker on hubd's "
                                       "MQTT topics")
    p.add_argument("-c", "--config", required=True, type=Path, metavar="SPEAKER_CONFIG",
                   help="the speaker's YAML config (see speaker.example.yaml)")
    p.add_argument("--check", action="store_true",
                   help="print the tts, player and mixer found, play a test sentence, exit (1: something is missing)")
    p.set_defaults(handler=_speaker)

    p = sub.add_parser("demo", help="run hub, embedded broker, platform simulator and devices in one process")
    p.add_argument("--state-dir", type=Path, default=None, help="where the demo keeps its database")
    p.add_argument("--http-port", type=int, default=8080)
    p.add_argument("--mqtt-port", type=int, default=1883)
    p.add_argument("--platform-port", type=int, default=9000)
    p.add_argument("--doorbell-every-s", type=float, default=25.0, help="how often the doorbell rings (about)")
    p.set_defaults(handler=_demo)
    return parser


def setup_logging(level: str) -> None:
    """One line per record on stderr (journald adds its own timestamps); webhook tokens blanked out."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # on the handler: it sees every logger's records
        handler.addFilter(RedactTokens())
    for noisy in ("aiohttp.access", "amqtt", "transitions"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _load(args: argparse.Namespace) -> HubdConfig:
    """The config of a command that uses no secret: secret files are neither read nor looked for."""
    return load_config(args.config, secrets=False)


def _load_with_secrets(args: argparse.Namespace) -> HubdConfig:
    """The config with its secrets, `${CREDENTIALS_DIRECTORY}` found outside systemd too (config.credential_dirs)."""
    return load_config(args.config)


def _run(args: argparse.Namespace) -> int:
    config = _load_with_secrets(args)
    setup_logging(args.log_level or config.log.level)
    from hubd.app import run

    return asyncio.run(run(config, config_path=args.config, log_level_fixed=args.log_level is not None))


def _init(args: argparse.Namespace) -> int:
    from hubd.config.model import CREDENTIALS_VAR, PLACEHOLDER, credential_dirs
    from hubd.initconfig import LOGIN_USER, init_config

    made = init_config(args.config, secrets_dir=args.secrets_dir, storage=args.storage)
    print(f"wrote {made.config} (the database: {made.storage})")
    print(f"wrote {made.client_secret} (mode 0600): put the clientSecret from the platform's console in it")
    print(f"wrote {made.login_password} (mode 0600): the password of {LOGIN_USER!r} on the authorize page")
    print(f"next: replace each {PLACEHOLDER} in {made.config}, then check it with")
    # Outside systemd hubd finds the secrets by itself in a credential store or next to the config.
    found = made.client_secret.parent in credential_dirs(made.config)
    setting = "" if found else f"{CREDENTIALS_VAR}={made.client_secret.parent} "
    print(f"  {setting}hubd check-config -c {made.config}")
    return 0


def _setup(args: argparse.Namespace) -> int:
    import os

    from hubd.setup import QUESTIONS, Setup

    if os.geteuid() != 0 and args.config.is_relative_to("/etc"):
        raise HubdError(f"setup writes {args.config} and {args.secrets_dir}: run it as root (sudo hubd setup)")
    return Setup(args.config, secrets_dir=args.secrets_dir, answers={q.flag: getattr(args, q.flag) for q in QUESTIONS},
                 client_secret_file=args.client_secret_file, password_file=args.password_file,
                 mqtt_password_file=args.mqtt_password_file, assume_yes=args.yes, start=not args.no_start,
                 start_anyway=args.start_anyway).run()


def _check_config(args: argparse.Namespace) -> int:
    config = _load_with_secrets(args)  # what `hubd run` needs, secrets included
    from hubd.dialects.enabled import config_problems as dialect_problems
    from hubd.driver.policy import config_problems

    # What `hubd run` refuses at start: callback hosts, accounts, proxies; a dialect's topics the table forbids.
    problems = [*config_problems(config), *dialect_problems(config)]
    if problems:
        raise ConfigError(problems)
    print("ok")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import os

    from hubd.doctor.run import doctor

    return doctor(args.config, sys.stdout, os.environ)


def _db_migrate(args: argparse.Namespace) -> int:
    config = _load(args)
    from hubd.store.db import Database

    db = Database.of(config.storage)
    db.call_blocking(lambda conn: None)
    if db.migration_backup is not None:
        print(f"copied the database to {db.migration_backup} before migrating it (to go back: docs/backup.md)")
    print(f"ok: {config.storage.path}")
    return 0


def _backup(args: argparse.Namespace) -> int:
    from hubd.backup.make import back_up

    target = Path(args.file)
    return back_up(args.config, _load(args), target, into_directory=args.file.endswith("/") or target.is_dir(),
                   with_secrets=args.with_secrets, keep=args.keep)


def _restore(args: argparse.Namespace) -> int:
    from hubd.backup.restore import restore

    return restore(args.config, args.file, with_config=args.with_config, secrets_dir=args.secrets_dir,
                   force=args.force)


def _demo(args: argparse.Namespace) -> int:
    setup_logging("warning")
    from hubd.app import build
    from hubd.demo.run import run_demo

    return asyncio.run(run_demo(build, state_dir=args.state_dir, http_port=args.http_port, mqtt_port=args.mqtt_port,
                                platform_port=args.platform_port, doorbell_every_s=args.doorbell_every_s))


def _speaker(args: argparse.Namespace) -> int:
    from hubd.speaker.config import load_speaker_config

    config = load_speaker_config(args.config)
    if args.check:
        setup_logging("warning")
        from hubd.speaker.check import run_check

        return asyncio.run(run_check(config))
    setup_logging(config.log.level)
    from hubd.speaker.agent import run_agent

    return asyncio.run(run_agent(config))


def _hash_password(args: argparse.Namespace) -> int:
    from hubd.driver.passwords import hash_password, read_password

    password = args.password if args.password is not None else read_password()
    print(hash_password(password))
    return 0


def _check_driver(args: argparse.Namespace) -> int:
    setup_logging("warning")
    from hubd.driver.checks import run_checks

    return asyncio.run(run_checks(args.driver_base_url, callback_url=args.callback_url,
                                  username=args.username, password=args.password))


def _tokens_list(args: argparse.Namespace) -> int:
    from hubd.driver.admin import list_tokens

    return list_tokens(_load(args))


def _tokens_revoke(args: argparse.Namespace) -> int:
    from hubd.driver.admin import revoke_tokens

    return revoke_tokens(_load(args), args.user)


def _grants_list(args: argparse.Namespace) -> int:
    from hubd.cloud.admin import list_grants

    return list_grants(_load(args))


def _grants_remove(args: argparse.Namespace) -> int:
    from hubd.cloud.admin import remove_grant

    return remove_grant(_load(args), args.user)


def _webhook_create(args: argparse.Namespace) -> int:
    from hubd.webhook.admin import create

    return create(_load(args), args.name, args.default_action)


def _webhook_list(args: argparse.Namespace) -> int:
    from hubd.webhook.admin import list_hooks

    return list_hooks(_load(args), as_json=args.json)


def _webhook_revoke(args: argparse.Namespace) -> int:
    from hubd.webhook.admin import revoke

    return revoke(_load(args), args.id)


def _webhook_rotate(args: argparse.Namespace) -> int:
    from hubd.webhook.admin import rotate

    return rotate(_load(args), args.id)


def _admin_token_create(args: argparse.Namespace) -> int:
    from hubd.owner.admin import create

    return create(_load(args), args.name)


def _admin_token_list(args: argparse.Namespace) -> int:
    from hubd.owner.admin import list_tokens

    return list_tokens(_load(args), as_json=args.json)


def _admin_token_revoke(args: argparse.Namespace) -> int:
    from hubd.owner.admin import revoke

    return revoke(_load(args), args.id)
