"""Webhook tokens never reach the log: a logging filter that blanks them in every record.

A webhook URL is its secret, and libraries log URLs: aiohttp's server prints the raw request
line of a malformed request (`b'POST /trigger/with/whk_... HTTP/9.Z'`). The filter goes on the
handlers that write the log (`hubd.cli.setup_logging`), so it sees the records of every logger,
and it redacts the message, the formatted traceback and the stack.
"""

from __future__ import annotations

import logging
import re

MARK = "<redacted>"
# After /trigger/with/: up to " HTTP/" when it is a request line (even a token with a space in it),
# else up to white space or a quote. Then any whk_ token anywhere else.
_PATH_RE = re.compile(r"/trigger/with/(?:[^\r\n'\"]*?(?= HTTP/)|[^\s'\"]+)")
_TOKEN_RE = re.compile(r"whk_[A-Za-z0-9_\-\\]+")
_FORMATTER = logging.Formatter()


def redact(text: str) -> str:
    """`text` with webhook URLs and tokens blanked out."""
    if "/trigger/with/" not in text and "whk_" not in text:
        return text
    return _TOKEN_RE.sub("whk_" + MARK, _PATH_RE.sub("/trigger/with/" + MARK, text))


class RedactTokens(logging.Filter):
    """Blanks webhook tokens in a record's message, traceback and stack; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it as usual
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # The formatter would format it later: do it now, and redact what it says.
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
