"""``$(...)`` substitutions of launch_xml: parsed once, evaluated against a LaunchContext.

Supported: ``$(var NAME)``, ``$(env NAME)``, ``$(env NAME DEFAULT)``, ``$(find-pkg-share PKG)``.
Arguments are separated by whitespace, may be quoted ('...' or "...") and may nest
substitutions, as in launch's frontend grammar. Anything else is refused at parse time.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Union

from .ament import package_share
from .errors import LaunchError

SUPPORTED_SUBSTITUTIONS = ('var', 'env', 'find-pkg-share')
_ARG_COUNTS = {'var': (1, 1), 'env': (1, 2), 'find-pkg-share': (1, 1)}
_NAME_CHARS = set('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-')


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Substitution:
    name: str
    args: tuple[Template, ...]


Part = Union[Text, Substitution]
Template = tuple[Part, ...]


@dataclass
class LaunchContext:
    """Launch configurations (``$(var)`` values) plus the pushed ROS namespace.

    launch_ros keeps the namespace in the launch configurations, so it is scoped exactly
    like them: a scoped ``group`` works on a copy; ``include`` does not (as in launch).
    """

    configs: dict[str, str] = field(default_factory=dict)
    ros_namespace: str | None = None
    # Every argument name declared so far in any visited file; shared by all copies.
    declared: set[str] = field(default_factory=set)

    def copy(self) -> LaunchContext:
        return LaunchContext(dict(self.configs), self.ros_namespace, self.declared)


def parse_template(text: str, where: str) -> Template:
    """Split ``text`` into literal text and substitutions; LaunchError on bad syntax."""
    parts, end = _parse_parts(text, 0, where, stop_chars='')
    assert end == len(text)
    return parts


def _parse_parts(text: str, i: int, where: str, stop_chars: str) -> tuple[Template, int]:
    parts: list[Part] = []
    buf: list[str] = []
    while i < len(text) and text[i] not in stop_chars:
        if text.startswith('$(', i):
            if buf:
                parts.append(Text(''.join(buf)))
                buf = []
            sub, i = _parse_substitution(text, i + 2, where)
            parts.append(sub)
        else:
            buf.append(text[i])
            i += 1
    if buf:
        parts.append(Text(''.join(buf)))
    return tuple(parts), i


def _parse_substitution(text: str, i: int, where: str) -> tuple[Substitution, int]:
    start = i
    while i < len(text) and text[i] in _NAME_CHARS:
        i += 1
    name = text[start:i]
    if not name:
        raise LaunchError(f"substitution without a name in '{text}'", where)
    if name not in SUPPORTED_SUBSTITUTIONS:
        raise LaunchError(f'unknown substitution $({name} ...) (supported: '
                          + ', '.join(SUPPORTED_SUBSTITUTIONS) + ')', where)
    args: list[Template] = []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            raise LaunchError(f"unterminated substitution $({name} ...) in '{text}'", where)
        if text[i] == ')':
            i += 1
            break
        if text[i] in '\'"':
            quote = text[i]
            arg, i = _parse_parts(text, i + 1, where, stop_chars=quote)
            if i >= len(text):
                raise LaunchError(f"unterminated quote in '{text}'", where)
            i += 1
        else:
            arg, i = _parse_parts(text, i, where, stop_chars=' \t\r\n)')
        args.append(arg)
    low, high = _ARG_COUNTS[name]
    if not low <= len(args) <= high:
        raise LaunchError(f'$({name}) takes {low}..{high} argument(s), got {len(args)}', where)
    return Substitution(name, tuple(args)), i


def evaluate(template: Template, ctx: LaunchContext, where: str) -> str:
    """Return the text of ``template`` with every substitution performed."""
    return ''.join(_evaluate_part(p, ctx, where) for p in template)


def _evaluate_part(part: Part, ctx: LaunchContext, where: str) -> str:
    if isinstance(part, Text):
        return part.text
    args = [evaluate(a, ctx, where) for a in part.args]
    if part.name == 'var':
        if args[0] not in ctx.configs:
            raise LaunchError(f"$(var {args[0]}): launch configuration '{args[0]}' is not set",
                              where)
        return ctx.configs[args[0]]
    if part.name == 'env':
        value = os.environ.get(args[0])
        if value is None:
            if len(args) == 1:
                raise LaunchError(f"$(env {args[0]}): environment variable '{args[0]}' is not "
                                  'set and no default is given', where)
            return args[1]
        return value
    if part.name == 'find-pkg-share':
        return find_package_share(args[0], where)
    raise AssertionError(part.name)  # refused at parse time


def find_package_share(package: str, where: str) -> str:
    return package_share(package, where, what=f' (in $(find-pkg-share {package}))')


def evaluate_cmdline(template: Template, ctx: LaunchContext, where: str) -> list[str]:
    """Split an ``args``/``ros_args`` attribute into arguments as launch does.

    Literal text is split shell-like; a substitution's value is never split, but sticks to
    literal text it touches (``--cell=$(var cell)`` stays one argument).
    """
    result: list[str] = []
    current: list[str] = []  # pieces of the argument being built; empty = none open

    def close() -> None:
        if current:
            result.append(''.join(current))
            current.clear()

    for part in template:
        if isinstance(part, Substitution):
            current.append(_evaluate_part(part, ctx, where))
            continue
        text = part.text
        try:
            tokens = shlex.split(text)
        except ValueError as exc:
            raise LaunchError(f"cannot split arguments '{text}': {exc}", where) from None
        if not tokens:
            close()
            continue
        if text[0].isspace():
            close()
        current.append(tokens[0])
        if len(tokens) > 1:
            close()
            result.extend(tokens[1:-1])
            current.append(tokens[-1])
        if text[-1].isspace():
            close()
    close()
    return result
