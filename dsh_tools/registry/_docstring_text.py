"""A ``@tool``'s description from its docstring: the summary and body, and the docstring's
``Example``/``Examples`` and ``Note``/``Notes`` sections as written.

``docstring_parser`` reads the Args/Returns/Raises sections into the parameters' and the
output's descriptions, and leaves every other section out of its description text: a Google
docstring loses any section after its first recognized one (a ``Note:`` it does not know of,
and an ``Examples:`` it parses into a snippet), a NumPy one every section. An example of a
call and a note on how the tool behaves are what a model reads a description for, so these
sections are taken from the docstring's own text, heading included, and follow the body; the
other sections stay out as before. Read once, at definition time.
"""

from __future__ import annotations

import re
from typing import Final

import docstring_parser
from docstring_parser.google import GoogleParser
from docstring_parser.numpydoc import NumpydocParser

__all__ = ["description_text"]

_KEPT: Final = frozenset({"Example", "Examples", "Note", "Notes"})
"""The sections, beside the summary and the body, that a model is shown."""
_GOOGLE_KEPT: Final = re.compile(r"^(Examples?|Notes?):[ \t]*$", re.M)
_GOOGLE_TITLES: Final = GoogleParser().titles_re
_NUMPY_TITLES: Final = NumpydocParser().titles_re
_SECTION_END: Final = re.compile(r"\n\S")
"""Where a Google section ends: at the next line that is not indented (as the parser reads
it)."""


def description_text(parsed: docstring_parser.Docstring, doc: str) -> str:
    """The description of a tool whose docstring (cleaned, ``inspect.getdoc``) is ``doc``,
    ``parsed`` by ``docstring_parser``."""
    parts = [part for part in (parsed.short_description, parsed.long_description) if part]
    if parsed.style is docstring_parser.DocstringStyle.GOOGLE:
        parts.extend(_google_sections(doc))
    elif parsed.style is docstring_parser.DocstringStyle.NUMPYDOC:
        parts.extend(_numpy_sections(doc))
    return "\n\n".join(parts)


def _google_sections(doc: str) -> list[str]:
    """The kept sections past the body (one before the first section the parser recognizes is
    part of the body already), each from its heading to its first unindented line."""
    first = _GOOGLE_TITLES.search(doc)
    if first is None:
        return []
    sections: list[str] = []
    for heading in _GOOGLE_KEPT.finditer(doc, first.start()):
        end = _SECTION_END.search(doc, heading.end())
        text = doc[heading.start() : len(doc) if end is None else end.start()].rstrip()
        if text != heading.group().rstrip():  # a heading with nothing beneath it says nothing
            sections.append(text)
    return sections


def _numpy_sections(doc: str) -> list[str]:
    """The kept sections, each from its heading (and underline) to the next section's."""
    headings = list(_NUMPY_TITLES.finditer(doc))
    sections: list[str] = []
    for index, heading in enumerate(headings):
        title = next(group for group in heading.groups() if group is not None)
        if title not in _KEPT:
            continue
        end = headings[index + 1].start() if index + 1 < len(headings) else len(doc)
        body = doc[heading.end() : end].strip("\n").rstrip()
        if body.strip():
            sections.append(f"{heading.group().strip()}\n{body}")
    return sections
