"""Read an XML launch file into a small element tree that remembers line numbers.

``xml.etree`` drops line numbers; every error the runner reports names ``file:line``, so the
tree is built from expat events directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from .errors import LaunchError


@dataclass
class XmlElement:
    """One XML element: tag, attributes (in document order), children and where it is."""

    tag: str
    attrib: dict[str, str]
    file: Path
    line: int
    children: list[XmlElement] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f'{self.file}:{self.line}'


def read_xml(path: Path) -> XmlElement:
    """Parse ``path`` and return its root element; LaunchError on unreadable or malformed XML."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LaunchError(f'cannot read launch file: {exc.strerror}', str(path)) from None
    parser = expat.ParserCreate()
    stack: list[XmlElement] = []
    roots: list[XmlElement] = []

    def start(tag: str, attrib: dict[str, str]) -> None:
        element = XmlElement(tag, dict(attrib), path, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise LaunchError(f'malformed XML: {expat.ErrorString(exc.code)}',
                          f'{path}:{exc.lineno}') from None
    return roots[0]
