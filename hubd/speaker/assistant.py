"""`asr` commands: the text goes to the household's voice assistant, and its answer comes back to be spoken.

Owns the two ways to ask: Home Assistant's conversation API (`POST {asr.url}/api/conversation/process`
with `Authorization: Bearer <token>`, body `{"text", "language"?, "agent_id"?}`; the answer is
`response.speech.plain.speech`) and a configured command (`asr.command` gets `{text}`, or the text on
stdin, and prints the answer). Failures become AssistantFailed with a reason a user can act on.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from hubd.speaker.config import AsrConfig
from hubd.speaker.process import ProcessFailed, run_program
from hubd.speaker.template import CommandTemplate, ValueRefused

CONVERSATION_PATH = "/api/conversation/process"
MAX_ANSWER_BYTES = 256 * 1024


class AssistantFailed(Exception):
    """The assistant could not be asked, or did not answer usably; the text says why and what to do."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the assistant said, and why the command failed if it did (the speech is spoken either way)."""

    speech: str
    problem: str | None = None


class Assistant(Protocol):
    """Something that takes a voice command's text and answers."""

    @property
    def label(self) -> str:
        """Who is asked, for messages: "Home Assistant" or the command's program."""
        ...

    async def ask(self, text: str) -> Answer:
        """The answer; AssistantFailed when there is none."""
        ...


class HomeAssistant:
    """Home Assistant's conversation API."""

    label = "Home Assistant"

    def __init__(self, session: aiohttp.ClientSession, *, url: str, token: str, language: str | None,
                 agent_id: str | None, timeout_s: float) -> None:
        self._session = session
        self._url = url
        self._token = token
        self._language = language
        self._agent_id = agent_id
        self._timeout_s = timeout_s

    async def ask(self, text: str) -> Answer:
        """POST the text; the spoken answer (a Home Assistant error answer comes with its problem)."""
        body: dict[str, str] = {"text": text}
        if self._language:
            body["language"] = self._language
        if self._agent_id:
            body["agent_id"] = self._agent_id
        data = await self._request("POST", CONVERSATION_PATH, body)
        response = data.get("response") if isinstance(data, dict) else None
        speech = _dig(response, "speech", "plain", "speech")
        if not isinstance(speech, str):
            raise AssistantFailed(f"Home Assistant answered without response.speech.plain.speech: "
                                  f"{json.dumps(data)[:200]}")
        if isinstance(response, dict) and response.get("response_type") == "error":
            code = _dig(response, "data", "code")
            why = f" ({code})" if isinstance(code, str) else ""
            return Answer(speech, f"Home Assistant could not carry out the command{why}: {speech}")
        return Answer(speech)

    async def probe(self) -> str:
        """GET {url}/api/ with the token (for --check): a sentence saying it answered; AssistantFailed if not."""
        data = await self._request("GET", "/api/", None)
        message = data.get("message") if isinstance(data, dict) else None
        return f"reachable, token accepted ({message})" if isinstance(message, str) else "reachable, token accepted"

    async def _request(self, method: str, path: str, body: dict[str, str] | None) -> Any:
        url = f"{self._url}{path}"
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._session.request(method, url, json=body, headers=headers) as response:
                    raw = await response.content.read(MAX_ANSWER_BYTES)
                    status = response.status
        except TimeoutError:
            raise AssistantFailed(f"Home Assistant at {self._url} did not answer within asr.timeout_s "
                                  f"({self._timeout_s:g} s)") from None
        except aiohttp.ClientError as err:
            raise AssistantFailed(f"cannot reach Home Assistant at {self._url}: {err}; is it running, and is "
                                  "asr.url right?") from None
        if status == 401:
            raise AssistantFailed("Home Assistant refused the token (HTTP 401): make a long-lived access token "
                                  "(your Home Assistant profile, Security) and put it in asr.token_file")
        if status == 404:
            raise AssistantFailed(f"Home Assistant has no {path} at {self._url} (HTTP 404): check asr.url (the "
                                  "base URL, e.g. http://127.0.0.1:8123) and that the conversation integration "
                                  "is on")
        if status != 200:
            text = " ".join(raw.decode(errors="replace").split())[:200]
            raise AssistantFailed(f"Home Assistant answered HTTP {status}" + (f": {text}" if text else ""))
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise AssistantFailed(f"Home Assistant's answer from {url} is not JSON; check asr.url") from None


class CommandAssistant:
    """asr.command: gets the text, prints the answer."""

    def __init__(self, template: CommandTemplate, timeout_s: float) -> None:
        self._template = template
        self._timeout_s = timeout_s
        self.label = f"`{template.program}`"

    async def ask(self, text: str) -> Answer:
        """Run the command; its stdout (stripped) is the answer, empty for none."""
        try:
            argv = self._template.fill({"text": text})
        except ValueRefused as err:
            raise AssistantFailed(f"the asr command: {err}") from None
        stdin = None if self._template.uses("text") else text.encode()
        try:
            out = await run_program(argv, what="the asr command", timeout_s=self._timeout_s, stdin=stdin,
                                    capture=True)
        except ProcessFailed as err:
            raise AssistantFailed(str(err)) from None
        return Answer(out.decode(errors="replace").strip())


def make_assistant(config: AsrConfig, session: aiohttp.ClientSession) -> HomeAssistant | CommandAssistant | None:
    """The configured assistant, or None when asr.forward is unset."""
    if config.forward == "home_assistant":
        assert config.url is not None and config.token is not None  # the loader's cross-checks
        return HomeAssistant(session, url=config.url, token=config.token.get_secret_value().strip(),
                             language=config.language, agent_id=config.agent_id, timeout_s=config.timeout_s)
    if config.forward == "command":
        template = config.template
        assert template is not None  # the loader's cross-checks
        return CommandAssistant(template, config.timeout_s)
    return None


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
