"""Audio downloads for `audio` commands: http and https only, a size cap, one timeout, audio content only.

Owns what the agent takes from a URL: the size is held while reading (a server that sends no
Content-Length, or a wrong one, is cut off at `audio.max_bytes`), the timeout covers the whole download,
and the content type must be audio (`audio/*`, or `application/ogg`). Where it may connect is
`hubd.speaker.reach`'s rule, held by the session it is given (`reach.download_session`), redirects
included; a refusal becomes a DownloadFailed that says what was refused and why. A URL for
player.url_command has its redirects followed here the same way (no body read) and the final one is handed
over, so the player gets no redirect to an address the rule refuses. Messages name the URL
without its query (which may carry a token). Wraps aiohttp.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from hubd.speaker.reach import Refused, check_host, url_problem

CHUNK_BYTES = 64 * 1024
MAX_REDIRECTS = 5
URL_SHOWN_CHARS = 120
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
WAV_TYPES = frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave"})
_EXTENSIONS = {"audio/mpeg": ".mp3", "audio/mp3": ".mp3", "audio/ogg": ".ogg", "application/ogg": ".ogg",
               "audio/opus": ".opus", "audio/flac": ".flac", "audio/x-flac": ".flac", "audio/aac": ".aac",
               "audio/mp4": ".m4a", "audio/webm": ".webm", **dict.fromkeys(WAV_TYPES, ".wav")}


class DownloadFailed(Exception):
    """The URL gave no playable audio; the text says why and what to do."""


@dataclass(frozen=True, slots=True)
class Downloaded:
    """An audio file on disk."""

    path: Path
    content_type: str
    size: int


def shown(url: str) -> str:
    """The URL for messages and logs: without query and fragment, shortened."""
    parts = urlsplit(url)
    text = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    return text if len(text) <= URL_SHOWN_CHARS else text[:URL_SHOWN_CHARS - 1] + "…"


def is_audio(content_type: str) -> bool:
    """audio/* or application/ogg."""
    return content_type.startswith("audio/") or content_type == "application/ogg"


async def download(session: aiohttp.ClientSession, url: str, directory: Path, stem: str, *, max_bytes: int,
                   timeout_s: float) -> Downloaded:
    """Fetch `url` into `directory/<stem><extension>`; DownloadFailed with a reason a user can act on."""
    problem = url_problem(url)
    if problem is not None:
        raise DownloadFailed(f"url: {problem}")
    name = shown(url)
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, allow_redirects=True, max_redirects=MAX_REDIRECTS) as response:
                if response.status != 200:
                    raise DownloadFailed(f"{name} answered HTTP {response.status} {response.reason or ''}".rstrip()
                                         + ": check that the URL is right and the file is there")
                content_type = response.content_type.lower()
                if not is_audio(content_type):
                    raise DownloadFailed(f"{name} is {content_type}, not audio: give the URL of an audio file "
                                         "(served as audio/..., e.g. audio/mpeg)")
                length = response.content_length
                if length is not None and length > max_bytes:
                    raise DownloadFailed(f"{name} is {length} bytes, more than audio.max_bytes ({max_bytes}); "
                                         "use a shorter sound or raise audio.max_bytes")
                body = await _read_capped(response, name, max_bytes)
    except TimeoutError:
        raise DownloadFailed(f"downloading {name} took longer than audio.timeout_s ({timeout_s:g} s); use a "
                             "smaller file or a faster server, or raise audio.timeout_s") from None
    except aiohttp.TooManyRedirects:
        raise DownloadFailed(f"{name} redirects more than {MAX_REDIRECTS} times; give the final URL") from None
    except aiohttp.NonHttpUrlRedirectClientError:
        raise DownloadFailed(f"{name} redirects to a URL that is not http:// or https://, which is never "
                             "followed; give the URL of an audio file on a web server") from None
    except aiohttp.InvalidUrlRedirectClientError:
        raise DownloadFailed(f"{name} redirects to an invalid URL; give the final URL") from None
    except aiohttp.ClientConnectorError as err:
        if isinstance(err.os_error, Refused):
            where = "" if err.host == URL(url).raw_host else " (where it redirects)"
            raise DownloadFailed(f"{name}: not fetched{where}: {err.os_error}") from None
        code = err.os_error.errno if err.os_error is not None else None
        why = os.strerror(code).lower() if code else str(err)
        raise DownloadFailed(f"cannot connect to {err.host}:{err.port} for {name}: {why}; check the URL and that "
                             "the server is up") from None
    except (aiohttp.InvalidURL, ValueError):  # ValueError: a host name IDNA cannot encode (aiohttp lets it through)
        raise DownloadFailed(f"url: {name} is not a valid URL") from None
    except aiohttp.ClientError as err:
        raise DownloadFailed(f"downloading {name} failed: {err}") from None
    path = directory / f"{stem}{_extension(content_type, url)}"
    await asyncio.to_thread(path.write_bytes, body)
    return Downloaded(path, content_type, len(body))


async def check_player_url(session: aiohttp.ClientSession, url: str, *, allow_local: bool, timeout_s: float) -> str:
    """The URL to hand to player.url_command: `url`, or where its redirects lead, each hop followed here through
    `session` (reach's rule: a hop on a refused address is never connected to) without reading a body, then the
    final one's host checked again (`check_host`: every address it has now, which the player looks up itself).
    DownloadFailed when a rule refuses the URL or a hop, or the whole takes longer than `timeout_s`."""
    problem = url_problem(url)
    if problem is not None:
        raise DownloadFailed(f"url: {problem}")
    name = shown(url)
    current = url
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(MAX_REDIRECTS + 1):
                target = await _redirect_of(session, current, name)
                if target is None:
                    await check_host(current, allow_local=allow_local)
                    return current
                current = target
    except TimeoutError:
        raise DownloadFailed(f"checking {name} (its redirects, its host's addresses) took longer than "
                             f"audio.timeout_s ({timeout_s:g} s); check the URL and the server") from None
    except Refused as err:
        where = "" if current == url else " (where it redirects)"
        raise DownloadFailed(f"{name}: not handed to player.url_command{where}: {err}") from None
    except aiohttp.ClientConnectorError as err:
        if isinstance(err.os_error, Refused):
            where = "" if current == url else " (where it redirects)"
            raise DownloadFailed(f"{name}: not handed to player.url_command{where}: {err.os_error}") from None
        raise DownloadFailed(f"cannot connect to {err.host}:{err.port} for {name}: {err.os_error or err}; check "
                             "the URL and that the server is up") from None
    except (aiohttp.InvalidURL, ValueError):
        raise DownloadFailed(f"url: {name} is not a valid URL") from None
    except aiohttp.ClientError as err:
        raise DownloadFailed(f"checking {name} failed: {err}") from None
    except OSError as err:  # socket.gaierror: the player could not reach it either
        raise DownloadFailed(f"cannot look up the host of {name}: {err.strerror or err}; check the URL") from None
    raise DownloadFailed(f"{name} redirects more than {MAX_REDIRECTS} times; give the final URL")


async def _redirect_of(session: aiohttp.ClientSession, url: str, name: str) -> str | None:
    """Where `url` redirects (absolute, checked as a URL), or None when it answers otherwise; HEAD, or GET
    where the server refuses HEAD, its body never read."""
    for method in ("HEAD", "GET"):
        async with session.request(method, url, allow_redirects=False) as response:
            if method == "HEAD" and response.status in (405, 501):
                continue
            if response.status not in _REDIRECTS:
                return None
            location = response.headers.get("Location")
            if not location:
                return None
            target = str(response.url.join(URL(location)))
            problem = url_problem(target)
            if problem is not None:
                raise DownloadFailed(f"{name} redirects to a URL that is never followed ({shown(target)} {problem})")
            return target
    return None


async def _read_capped(response: aiohttp.ClientResponse, name: str, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            raise DownloadFailed(f"{name} is more than audio.max_bytes ({max_bytes} bytes; the server sent no "
                                 "size, the download was stopped there); use a shorter sound or raise "
                                 "audio.max_bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _extension(content_type: str, url: str) -> str:
    """The file extension players expect: from the content type, else the URL's own."""
    known = _EXTENSIONS.get(content_type) or mimetypes.guess_extension(content_type)
    if known:
        return known
    suffix = Path(urlsplit(url).path).suffix.lower()
    return suffix if suffix.isascii() and 1 < len(suffix) <= 6 and suffix[1:].isalnum() else ".audio"
