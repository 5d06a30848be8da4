"""The one door to an emulated cell's hidden truth, and the record of who went through it.

An emulated cell (core/emulated_world.EmulatedWorld) knows what a real cell never tells: the
objects' true poses, the spec's constants (masses, frictions, gains, dampings), its contact
settings, its MuJoCo model and state. Every such accessor of the world calls
:meth:`TruthDoor.read`, which records the read with its purpose and its reader (the first
caller outside this module and the world, as ``module.function:line``).

A read is *allowed* while a purpose is open on the reading thread (``with door.scoring():``
for the evaluator's scores, ``with door.emulation('...'):`` for the emulator producing what a
real cell's sensors give, e.g. the calibrated camera pose a calibration would publish) or when
its reader is *declared* (``declare``: a named exception with its reason, e.g. servo gains a
lab's controller configuration holds). Any other read is a *leak*: recorded, and with
``strict`` raised as :class:`TruthLeak` naming the reader and what it read.

:meth:`TruthDoor.report` gives {'allowed': {purpose: {what: count}}, 'declared': [...],
'leaks': [{'what', 'reader', 'count'}]}: the evaluation report shows it per cell.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from pathlib import Path

_HERE = {str(Path(__file__).resolve())} | {
    str(Path(__file__).resolve().with_name(name))
    for name in ('emulated_world.py', 'drake_world.py', 'world.py')}

SCORING = 'scoring'
EMULATION = 'emulation'


class TruthLeak(RuntimeError):
    """A stage read a cell's hidden truth outside scoring / emulation (strict door)."""


def _reader(depth: int = 2) -> tuple[str, str]:
    """(function key 'module.function', 'module.function:line') of the first frame outside
    this module and the emulated world."""
    f = sys._getframe(depth)
    while f is not None and str(Path(f.f_code.co_filename).resolve()) in _HERE:
        f = f.f_back
    if f is None:
        return '?', '?'
    mod = f.f_globals.get('__name__', '?')
    key = f'{mod}.{f.f_code.co_name}'
    return key, f'{key}:{f.f_lineno}'


class TruthDoor:
    """Records every read of a cell's truth; allows it only inside an open purpose."""

    def __init__(self, strict: bool = False):
        self.strict = bool(strict)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._allowed: Counter = Counter()      # (purpose, what) -> n
        self._declared_reads: Counter = Counter()   # (reason, what) -> n
        self._leaks: Counter = Counter()        # (what, reader) -> n
        self._declared: dict[str, str] = {}     # function key -> reason

    # ---------------------------------------------------------------- opening
    def _stack(self) -> list:
        s = getattr(self._local, 'stack', None)
        if s is None:
            s = self._local.stack = []
        return s

    @contextlib.contextmanager
    def open(self, purpose: str):
        """Allow truth reads on this thread for ``purpose`` (nested: the innermost counts)."""
        if not purpose:
            raise ValueError('a truth door needs a purpose')
        stack = self._stack()
        stack.append(purpose)
        try:
            yield self
        finally:
            stack.pop()

    def scoring(self):
        """The evaluator scoring against the truth: the only reason a score may read it."""
        return self.open(SCORING)

    def emulation(self, what: str):
        """The emulator producing what a real cell gives (``what``: which sensor output)."""
        return self.open(f'{EMULATION}: {what}')

    def declare(self, function: str, reason: str) -> None:
        """Reads by ``function`` ('package.module.function') are a declared exception."""
        self._declared[function] = reason

    @contextlib.contextmanager
    def strict_mode(self, strict: bool = True):
        """Raise on leaks inside the block."""
        old, self.strict = self.strict, bool(strict)
        try:
            yield self
        finally:
            self.strict = old

    # ---------------------------------------------------------------- reading
    def read(self, what: str) -> None:
        """Record one read of ``what``; raises TruthLeak for a strict door's leak."""
        stack = self._stack()
        if stack:
            with self._lock:
                self._allowed[(stack[-1], what)] += 1
            return
        key, where = _reader()
        reason = self._declared.get(key)
        if reason is not None:
            with self._lock:
                self._declared_reads[(f'{key}: {reason}', what)] += 1
            return
        with self._lock:
            self._leaks[(what, where)] += 1
        if self.strict:
            raise TruthLeak(f'{where} read the cell\'s hidden truth ({what}) outside scoring '
                            f'and emulation')

    # ---------------------------------------------------------------- report
    @property
    def leaks(self) -> list[dict]:
        """Each undeclared truth read: what, reader and count."""
        with self._lock:
            return [{'what': w, 'reader': r, 'count': n}
                    for (w, r), n in sorted(self._leaks.items())]

    def report(self) -> dict:
        """The door's ledger: allowed reads per purpose, declared reads and leaks."""
        with self._lock:
            allowed: dict = {}
            for (purpose, what), n in sorted(self._allowed.items()):
                allowed.setdefault(purpose, {})[what] = n
            declared = [{'reader': r, 'what': w, 'count': n}
                        for (r, w), n in sorted(self._declared_reads.items())]
        return {'allowed': allowed, 'declared': declared, 'leaks': self.leaks}

    def clear(self) -> None:
        """Forget every recorded read."""
        with self._lock:
            self._allowed.clear()
            self._declared_reads.clear()
            self._leaks.clear()


__all__ = ['EMULATION', 'SCORING', 'TruthDoor', 'TruthLeak']
