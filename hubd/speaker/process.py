"""Running the speaker's programs (tts, players, mixer, an asr command): one child, never a shell, always ended.

Owns the child's life: it starts in a session of its own (so a wrapper script's children go with it), a
timeout or a cancellation (a stop) sends SIGTERM to that whole group and, after TERM_WAIT_S, SIGKILL; the
child is always reaped. Failures become ProcessFailed with a sentence a user can act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

TERM_WAIT_S = 1.0  # after SIGTERM, how long a child gets before SIGKILL
STDERR_TAIL_CHARS = 300

# Debian packages of the programs the agent finds by itself or the example config names.
PACKAGES = {
    "espeak-ng": "espeak-ng", "aplay": "alsa-utils", "amixer": "alsa-utils", "paplay": "pulseaudio-utils",
    "pactl": "pulseaudio-utils", "pw-play": "pipewire-bin", "wpctl": "wireplumber", "ffplay": "ffmpeg",
    "mpg123": "mpg123", "gst-play-1.0": "gstreamer1.0-tools", "sox": "sox", "play": "sox", "mpc": "mpc",
    "mpv": "mpv",
}


class ProcessFailed(Exception):
    """A program could not be run or did not succeed; the text says why and what to do."""


def install_hint(program: str) -> str:
    """`sudo apt-get install <package>` for a program the agent knows, else a general hint."""
    name = Path(program).name
    package = PACKAGES.get(name)
    if package is not None:
        return f"install it (sudo apt-get install {package})"
    return "install it or give the full path"


async def run_program(argv: Sequence[str], *, what: str, timeout_s: float, stdin: bytes | None = None,
                      capture: bool = False) -> bytes:
    """Run argv to its end; its stdout if `capture`. ProcessFailed when it cannot start, fails or times out.

    `what` names the program's role in messages ("the tts command"). Cancelling the caller ends the child.
    """
    name = Path(argv[0]).name
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ProcessFailed(f"{what}: `{argv[0]}` is not installed or not on PATH; {install_hint(argv[0])}") from None
    except OSError as err:  # also E2BIG: arguments longer than the system takes
        raise ProcessFailed(f"{what}: cannot run `{argv[0]}`: {err.strerror or err}") from None
    except ValueError as err:  # a NUL in an argument, or a string the file system encoding cannot take
        raise ProcessFailed(f"{what}: cannot run `{name}`: an argument cannot be passed to a program ({err})") from None
    try:
        async with asyncio.timeout(timeout_s):
            out, errors = await proc.communicate(stdin)
    except TimeoutError:
        await end_process(proc)
        raise ProcessFailed(f"{what} `{name}` took longer than {timeout_s:g} s and was stopped") from None
    except BaseException:  # cancelled (a stop): the child must not outlive the command
        await end_process(proc)
        raise
    code = proc.returncode
    if code != 0:
        tail = " ".join(errors.decode(errors="replace").split())[-STDERR_TAIL_CHARS:]
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with {code}"
        raise ProcessFailed(f"{what} `{name}` {how}" + (f": {tail}" if tail else " (it printed nothing)"))
    return out if capture else b""


async def end_process(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the child's process group, SIGKILL it after TERM_WAIT_S, and reap the child."""
    if proc.returncode is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            async with asyncio.timeout(TERM_WAIT_S):
                await proc.wait()
        except TimeoutError:
            log.warning("pid %d did not end within %s s of SIGTERM: SIGKILL", proc.pid, TERM_WAIT_S)
    # Also after the child ended: what it started in its group goes too.
    _signal_group(proc, signal.SIGKILL)
    await proc.wait()


def _signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    # The child leads its own session (start_new_session), so its pid is its process group's id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
