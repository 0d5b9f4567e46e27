"""hubd's HTTP error shape, `{"error": "<what to do>", "details": [...]}`, also for what aiohttp refuses itself.

The error middleware (`hubd/web/server.py`) answers in this shape whatever a route comes to. A request that
aiohttp refuses before any route runs, it answers from its protocol, in plain text: one it cannot parse, a
body in a Content-Encoding it cannot decode (`br`, `zstd`: its text then names a package to install), an
`Expect` header other than `100-continue`. `JsonErrorProtocol` is aiohttp's protocol with those answers in
hubd's shape; aiohttp still logs them (as client faults, server.py's filter). A refusal or failure is logged with
`route_pattern`, never the path.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError, LineTooLong

CONTENT_ENCODINGS = "gzip, deflate"  # what hubd's aiohttp decodes in a request body without extra packages
PARSER_SAID_CHARS = 200  # of aiohttp's reason for refusing a request, quoted back to its sender


def json_error(status: int, message: str, details: list[dict[str, str]],
               headers: dict[str, str] | None = None) -> web.Response:
    """The error response every route and refusal of hubd's HTTP server answers with."""
    return web.json_response({"error": message, "details": details}, status=status, headers=headers)


def route_pattern(request: web.Request) -> str:
    """The route's pattern for the log, e.g. `/trigger/with/{token}`: never the path itself, which may hold a
    secret."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "(no route)"


class JsonErrorProtocol(web.RequestHandler):
    """aiohttp's protocol for one connection, answering the requests it refuses itself in hubd's JSON shape."""

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's own answer to a request it could not parse or serve (logged there), as JSON."""
        super().handle_error(request, status, exc, message)  # logs it; raises if a response was begun already
        text, details = _refusal(status, exc)
        response = json_error(status, text, details)
        response.force_close()  # as aiohttp's own: the rest of the stream cannot be trusted
        return response

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        """Send the response; an HTTP error raised before the routes' middleware (a bad Expect) goes as JSON."""
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            headers = {k: v for k, v in resp.headers.items() if k.lower() not in ("content-type", "content-length")}
            if isinstance(resp, web.HTTPExpectationFailed):
                text = "the Expect header may only be 100-continue; send the request without it"
                details = [{"path": "(header) Expect", "message": "not 100-continue"}]
            else:
                text, details = f"{resp.status} {resp.reason}", []
            resp = json_error(resp.status, text, details, headers)
        return await super().finish_response(request, resp, start_time)


def _refusal(status: int, exc: BaseException | None) -> tuple[str, list[dict[str, str]]]:
    """The error sentence and details for a request aiohttp refused with `status`."""
    if isinstance(exc, ContentEncodingError):
        return (f"the body's Content-Encoding is not one hubd reads ({CONTENT_ENCODINGS}); send the body "
                "uncompressed, or compressed with one of those", [{"path": "(header) Content-Encoding",
                                                                   "message": "ContentEncodingError"}])
    if isinstance(exc, LineTooLong):
        return ("the request line or a header is too long; send a shorter one",
                [{"path": "(request)", "message": "LineTooLong"}])
    if isinstance(exc, HttpProcessingError):
        said = " ".join(str(exc.message).split())[:PARSER_SAID_CHARS]  # e.g. "Missing Host header"
        return ("the request is not valid HTTP/1.1; check what the client sends",
                [{"path": "(request)", "message": f"{type(exc).__name__}: {said}" if said else type(exc).__name__}])
    if status >= 500:
        return "internal error in hubd; see the hubd log", []
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "refused"
    return f"{status} {phrase}", []
