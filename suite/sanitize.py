"""Text leaving the suite: the one sanitiser every string goes through on its way to a reader.

What a runtime prints, what a record holds and what a user's file names can carry any byte: an
escape sequence that sets a terminal's title or writes its clipboard, a clear-screen, a NUL, a
right-to-left override that reorders what a reader sees, a byte the chart renderer cannot take.
`printable` replaces every such character with a visible stand-in (the Unicode control picture of a
C0 control, `␛` for ESC; U+FFFD for the others) wherever a string leaves the suite: the console
(the bench's table, `suite results`, `suite compare`, progress lines), the charts, the pages and
the CSV export. Tab and line feed stay: they are layout, and every destination lays them out.

`csv_cell` adds the spreadsheet rule (OWASP's CSV injection practice): a cell that begins with
`=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula by a spreadsheet, so it gets a
leading `'`. Parquet keeps values typed and as they were.

`SafeConsole` is the rich console every command prints through (it makes each rendered segment
printable), `PrintableFormatter` the log formatter of a plain log, `printable_markup` the pages'
templates' `finalize`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from markupsafe import Markup
from rich.console import Console
from rich.segment import Segment

# C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional marks, embeddings,
# overrides and isolates (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A cell a spreadsheet reads as a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ ... ␟: ESC shows as ␛
    if code == 0x7F:
        return "\u2421"  # ␡
    return "\ufffd"


def has_control(text: str) -> bool:
    """Whether `text` holds a character `printable` replaces."""
    return CONTROL.search(text) is not None


def printable(text: str) -> str:
    """`text` with every control character replaced by a visible stand-in (tab and line feed kept)."""
    return CONTROL.sub(_stand_in, text) if CONTROL.search(text) else text


def printable_any(value: Any) -> Any:
    """A value with every string in it made printable (lists, tuples and mappings walked)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [printable_any(v) for v in value]
    if isinstance(value, tuple):
        return tuple(printable_any(v) for v in value)
    if isinstance(value, dict):
        return {printable_any(k): printable_any(v) for k, v in value.items()}
    return value


def csv_cell(text: str) -> str:
    """A string as one CSV cell a spreadsheet shows as text: printable, and never a formula."""
    if text.startswith(FORMULA_START):
        text = "'" + text
    return printable(text)


class SafeConsole(Console):
    """A rich console whose every printed character goes through `printable`: the text of each
    rendered segment (a table's cells, a progress line, a log record), never rich's own control
    segments (the live display's cursor moves) or styles. rich itself strips only BEL, BS, VT, FF and CR."""

    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and CONTROL.search(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment


class PrintableFormatter(logging.Formatter):
    """A log formatter whose lines are printable (a runtime's log line may hold any byte)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def printable_markup(value: Any) -> Any:
    """A template expression's value made printable, markup kept markup (jinja's `finalize`)."""
    if isinstance(value, Markup):
        return Markup(printable(str(value)))
    return printable(value) if isinstance(value, str) else value
