"""The speaker agent: announces the speaker on hubd's topics and carries out its commands, one at a time.

Owns the speaker's MQTT session (hubd.mqtt.client: a retained config, availability `online` with the last
will `offline`, subscriptions to `B/device/ID/command` and `B/device/ID/set`), the bounded command queue
(a full queue answers `error` at once, never drops), the results on `command/result`, the Volume and Mute
controls (a state on `B/device/ID/state` confirms each) and the stop: the sound playing gets
SOUND_GRACE_S to end, then its program is ended, every command still waiting is answered, `offline` is
published and the session is closed with a DISCONNECT, all within STOP_BUDGET_S. A command or message that
fails in a way the checks did not foresee is that command's `error` result (and a traceback in the log),
never the agent's end. Audio URLs are fetched through a session of their own (hubd.speaker.reach), not the
voice assistant's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp

from hubd.errors import MqttRejected, MqttUnavailable
from hubd.lifecycle import Backoff
from hubd.mqtt.client import PACKET_HEADROOM_BYTES, MqttClient, Will
from hubd.mqtt.inbox import Message
from hubd.speaker import mixer
from hubd.speaker.assistant import Assistant, AssistantFailed, make_assistant
from hubd.speaker.config import SpeakerConfig
from hubd.speaker.fetch import DownloadFailed, check_player_url, download, shown
from hubd.speaker.reach import download_session
from hubd.speaker.sound import Loudspeaker, SoundFailed, Tools, find_tools, tool_problems
from hubd.speaker.wire import CommandInvalid, Job, announcement, encode, parse_command

log = logging.getLogger(__name__)

SOUND_GRACE_S = 1.5  # at a stop, how long the sound playing may go on before its program is ended
STOP_BUDGET_S = 4.5  # the whole stop, under the 5 s issue 16 allows (the player gets TERM_WAIT_S of it)
FLUSH_S = 1.0  # at a stop, for the last results to reach the broker
MAX_CONTROLS_WAITING = 32
MAX_OUTGOING = 1000


class SpeakerAgent:
    """One speaker: its MQTT session, its command queue and worker, its mixer."""

    name = "speaker"

    def __init__(self, config: SpeakerConfig, tools: Tools) -> None:
        self._config = config
        self._tools = tools
        base = f"{config.mqtt.base_topic}/device/{config.id}"
        self._topics = {suffix: f"{base}/{suffix}" for suffix in
                        ("config", "state", "availability", "command", "command/result", "set")}
        self._client = MqttClient(
            host=config.mqtt.host, port=config.mqtt.port, client_id=config.client_id,
            # A clean session: commands sent while the agent was away are stale ("Dinner is ready" an hour late).
            clean_session=True,
            username=config.mqtt.username,
            password=config.mqtt.password.get_secret_value() if config.mqtt.password else None,
            tls=config.mqtt.tls, ca_file=str(config.mqtt.ca_file) if config.mqtt.ca_file else None,
            will=Will(self._topics["availability"], b"offline"), keepalive_s=config.mqtt.keepalive_s,
            # The broker is asked (MQTT 5) never to send a larger message: a hostile one on the command topic
            # costs the agent nothing.
            max_packet_bytes=config.mqtt.max_message_bytes + PACKET_HEADROOM_BYTES,
        )
        self._jobs: asyncio.Queue[Job] = asyncio.Queue(config.queue_size)
        self._controls: asyncio.Queue[mixer.SetRequest] = asyncio.Queue(MAX_CONTROLS_WAITING)
        self._outgoing: deque[tuple[str, bytes, bool]] = deque()
        self._outgoing_added = asyncio.Event()
        self._outgoing_empty = asyncio.Event()
        self._outgoing_empty.set()
        self._link_up = False
        self._link_generation = 0
        self._link_changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self._level = mixer.Level(config.volume.initial)
        self._level_known = False
        self._workdir: Path | None = None
        self._session: aiohttp.ClientSession | None = None  # the voice assistant's (asr.url, trusted)
        self._downloads: aiohttp.ClientSession | None = None  # audio URLs: only where hubd.speaker.reach allows
        self._speaker: Loudspeaker | None = None
        self._assistant: Assistant | None = None

    async def start(self) -> None:
        """Make the work directory and the HTTP session, and set the mixer to volume.initial."""
        for problem in tool_problems(self._tools):
            log.warning("%s", problem)
        self._workdir = Path(tempfile.mkdtemp(prefix=f"hubd-speaker-{self._config.id}-"))
        self._session = aiohttp.ClientSession()
        self._downloads = download_session(allow_local=self._config.audio.allow_local)
        self._speaker = Loudspeaker(self._config, self._tools, self._workdir)
        self._assistant = make_assistant(self._config.asr, self._session)
        if self._tools.mixer is not None:
            try:
                await self._speaker.set_level(self._level.percent)
                self._level_known = True
            except SoundFailed as err:
                log.warning("cannot set the volume to volume.initial (%d): %s; the speaker reports its volume "
                            "once a Volume control has worked", self._level.volume, err)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then stop within STOP_BUDGET_S."""
        async with asyncio.TaskGroup() as tg:
            link = tg.create_task(self._link(), name="speaker-link")
            sender = tg.create_task(self._send(), name="speaker-send")
            worker = tg.create_task(self._work(), name="speaker-commands")
            controls = tg.create_task(self._control(), name="speaker-controls")
            await stop.wait()
            log.info("stopping")
            try:
                async with asyncio.timeout(STOP_BUDGET_S):
                    await self._wind_down(worker, controls, sender, link)
            except TimeoutError:
                log.warning("the stop took longer than %s s; closing the MQTT connection", STOP_BUDGET_S)
            for task in (worker, controls, sender, link):
                task.cancel()
        self._client.abort("stopped")  # a no-op after the clean DISCONNECT

    async def stop(self) -> None:
        """Close the HTTP session and remove the work directory. Idempotent."""
        for session in (self._session, self._downloads):
            if session is not None:
                await session.close()
        self._session = self._downloads = None
        if self._workdir is not None:
            await asyncio.to_thread(shutil.rmtree, self._workdir, True)
            self._workdir = None

    async def _wind_down(self, worker: asyncio.Task[None], controls: asyncio.Task[None],
                         sender: asyncio.Task[None], link: asyncio.Task[None]) -> None:
        self._stopping = True
        if not self._idle.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SOUND_GRACE_S):
                    await self._idle.wait()
        for task in (worker, controls):
            task.cancel()
        await asyncio.wait([worker, controls])
        while not self._jobs.empty():
            job = self._jobs.get_nowait()
            self._result(job.id, "error", "the speaker agent stopped before it came to this command")
        if self._link_up:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_S):
                    await self._outgoing_empty.wait()
        sender.cancel()
        link.cancel()
        await asyncio.wait([sender, link])
        if self._client.connected:
            with contextlib.suppress(MqttUnavailable):
                await self._client.publish(self._topics["availability"], b"offline", retain=True, timeout_s=1.0)
            await self._client.disconnect()

    # The MQTT session: connect, announce, receive; reconnect with backoff.

    async def _link(self) -> None:
        backoff = Backoff(initial_s=0.5, cap_s=30.0)
        host = f"{self._config.mqtt.host}:{self._config.mqtt.port}"
        while True:
            try:
                await self._client.connect()
                await self._client.subscribe([(self._topics["command"], 1), (self._topics["set"], 1)])
                await self._client.publish(self._topics["config"], encode(announcement(self._config)), retain=True)
                if self._level_known:
                    await self._client.publish(self._topics["state"], encode(self._level.state()))
                await self._client.publish(self._topics["availability"], b"online", retain=True)
                self._set_link(True)
                backoff.reset()
                log.info("speaker %s online on %s as %s", self._config.id, host, self._client.client_id)
                while True:
                    batch = await self._client.next_batch()
                    for message in batch:
                        try:
                            self._receive(message)
                        except Exception:  # a message the checks did not foresee: that message only, never the agent
                            log.exception("message on %s not handled", message.topic)
                    self._client.ack(batch)
            except MqttUnavailable as err:
                self._set_link(False)
                self._client.abort(str(err))
                level = logging.ERROR if isinstance(err, MqttRejected) else logging.WARNING
                log.log(level, "MQTT broker %s: %s; trying again", host, err)
                await backoff.sleep()

    def _set_link(self, up: bool) -> None:
        self._link_up = up
        if up:
            self._link_generation += 1
        self._link_changed.set()
        self._link_changed = asyncio.Event()

    async def _link_after(self, generation: int) -> int:
        """Wait for a session newer than `generation` (the one a publish failed on); its generation."""
        while not (self._link_up and self._link_generation != generation):
            changed = self._link_changed
            await changed.wait()
        return self._link_generation

    def _receive(self, message: Message) -> None:
        if message.topic == self._topics["command"]:
            self._on_command(message.payload)
        elif message.topic == self._topics["set"]:
            self._on_set(message.payload)

    def _on_command(self, payload: bytes) -> None:
        command_id, parsed = parse_command(payload)
        if isinstance(parsed, CommandInvalid):
            log.warning("command %r refused: %s", command_id, parsed)
            if command_id is not None:
                self._result(command_id, "error", str(parsed))
            return
        if self._stopping:
            self._result(parsed.id, "error", "the speaker agent is stopping; send the command again once it is back")
            return
        try:
            self._jobs.put_nowait(parsed)
        except asyncio.QueueFull:
            log.warning("command %s refused: %d commands are waiting already", parsed.id, self._jobs.qsize())
            self._result(parsed.id, "error", f"the speaker is busy: its queue is full ({self._jobs.qsize()} "
                                             "waiting, queue_size); send the command again when they are done")
            return
        log.info("command %s (%s) queued", parsed.id, parsed.type)

    def _on_set(self, payload: bytes) -> None:
        try:
            request = mixer.parse_set(payload)
        except mixer.SetInvalid as err:
            log.warning("set message refused: %s", err)
            return
        if self._tools.mixer is None:
            log.warning("set %s.%s refused: no volume.command is configured", request.interface, request.operation)
            return
        try:
            self._controls.put_nowait(request)
        except asyncio.QueueFull:
            log.warning("set %s.%s dropped: %d controls are waiting already", request.interface, request.operation,
                        MAX_CONTROLS_WAITING)

    # Outgoing messages (results and states), in order, each published once a session takes it.

    def _publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        if len(self._outgoing) >= MAX_OUTGOING:
            dropped = self._outgoing.popleft()
            log.warning("%d messages wait for the broker: dropping the oldest, for %s", MAX_OUTGOING, dropped[0])
        self._outgoing.append((topic, payload, retain))
        self._outgoing_empty.clear()
        self._outgoing_added.set()

    def _result(self, command_id: str, status: str, message: str | None = None) -> None:
        body: dict[str, Any] = {"id": command_id, "status": status}
        if message is not None:
            body["message"] = message
        self._publish(self._topics["command/result"], encode(body))

    async def _send(self) -> None:
        failed_on = 0
        while True:
            if not self._outgoing:
                self._outgoing_empty.set()
                self._outgoing_added.clear()
                await self._outgoing_added.wait()
                continue
            generation = self._link_generation if self._link_up else -1
            if generation == -1 or generation == failed_on:
                await self._link_after(failed_on)
                continue
            topic, payload, retain = self._outgoing[0]
            try:
                await self._client.publish(topic, payload, retain=retain)
            except MqttUnavailable as err:
                log.info("publish to %s waits for the next connection: %s", topic, err)
                failed_on = generation
                continue
            self._outgoing.popleft()

    # Commands: one at a time, in arrival order.

    async def _work(self) -> None:
        while True:
            job = await self._jobs.get()
            if self._stopping:
                self._result(job.id, "error", "the speaker agent stopped before it came to this command")
                continue
            self._idle.clear()
            started = time.monotonic()
            try:
                status, message = await self._carry_out(job)
            except asyncio.CancelledError:
                self._result(job.id, "error", "stopped: the speaker agent was asked to stop while this played")
                raise
            except Exception:  # what the checks did not foresee fails this command only, never the agent
                log.exception("command %s (%s) failed", job.id, job.type)
                status, message = "error", "the speaker agent failed on this command; its log says why"
            finally:
                self._idle.set()
            log.info("command %s (%s): %s in %.1f s%s", job.id, job.type, status, time.monotonic() - started,
                     f": {message}" if status == "error" else "")
            self._result(job.id, status, message)

    async def _carry_out(self, job: Job) -> tuple[str, str | None]:
        """("done" | "error", message)."""
        speaker = self._speaker
        assert speaker is not None  # start() ran
        try:
            if job.type == "tts":
                assert job.text is not None
                log.debug("command %s: saying %r", job.id, job.text)
                await speaker.say(job.text)
                return "done", None
            if job.type == "audio":
                assert job.url is not None
                await self._play(speaker, job.url)
                return "done", None
            assert job.text is not None
            return await self._ask(speaker, job.text)
        except (SoundFailed, DownloadFailed, AssistantFailed) as err:
            return "error", str(err)

    async def _play(self, speaker: Loudspeaker, url: str) -> None:
        assert self._downloads is not None  # start() ran
        if self._tools.url_player is not None:
            final = await check_player_url(self._downloads, url, allow_local=self._config.audio.allow_local,
                                           timeout_s=self._config.audio.timeout_s)
            log.debug("handing %s to the URL player%s", shown(final), "" if final == url else f" ({shown(url)} "
                      "redirects there)")
            await speaker.play_url(final)
            return
        audio = await download(self._downloads, url, speaker.workdir, speaker.next_stem("audio"),
                               max_bytes=self._config.audio.max_bytes, timeout_s=self._config.audio.timeout_s)
        try:
            log.debug("playing %s (%s, %d bytes)", shown(url), audio.content_type, audio.size)
            await speaker.play_file(audio.path, audio.content_type)
        finally:
            audio.path.unlink(missing_ok=True)

    async def _ask(self, speaker: Loudspeaker, text: str) -> tuple[str, str | None]:
        assistant = self._assistant
        if assistant is None:
            return "error", ("this speaker has no voice assistant: set asr.forward (home_assistant or command) in "
                             "its config")
        log.debug("asking %s: %r", assistant.label, text)
        answer = await assistant.ask(text)
        if answer.speech:
            await speaker.say(answer.speech)
        if answer.problem is not None:
            return "error", answer.problem
        return "done", (f"{assistant.label} answered: {answer.speech}" if answer.speech
                        else f"{assistant.label} gave no answer to speak")

    # Volume and Mute.

    async def _control(self) -> None:
        speaker = self._speaker
        assert speaker is not None  # start() ran
        while True:
            request = await self._controls.get()
            try:
                wanted = mixer.apply(self._level, request)
            except mixer.SetInvalid as err:
                log.warning("set %s.%s refused: %s", request.interface, request.operation, err)
                continue
            if wanted.percent != self._level.percent or not self._level_known:
                try:
                    await speaker.set_level(wanted.percent)
                except SoundFailed as err:
                    log.warning("set %s.%s failed: %s", request.interface, request.operation, err)
                    continue
            self._level = wanted
            self._level_known = True
            log.info("volume %d, mute %s", wanted.volume, "on" if wanted.muted else "off")
            self._publish(self._topics["state"], encode(wanted.state()))


async def run_agent(config: SpeakerConfig) -> int:
    """`hubd speaker -c FILE`: run until SIGTERM or SIGINT; 0 after a clean stop."""
    agent = SpeakerAgent(config, find_tools(config))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await agent.start()
        await agent.run(stop)
    finally:
        await agent.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("stopped")
    return 0
