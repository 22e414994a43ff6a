# SPDX-License-Identifier: MIT
# Copyright (c) the mom_events authors
# Part of the mom_events project (see its README): its one module, meant to be copied into a bot
# as it is; the project's LICENSE, README and tests stay with it.  POSIX only; tested on Linux.
"""mom_events: a directory of JSON files becomes scheduled wake-ups for an agent.

An agent schedules its own future work by writing a file into the events
directory; the watcher calls the bot's handler when the event is due::

    {"type": "one-shot", "channelId": "C123", "text": "Remind Mario",
     "at": "2025-12-15T09:00:00+01:00"}

    -> handler(Event(...)) whose .message is
       "[EVENT:dentist.json:one-shot:2025-12-15T09:00:00+01:00] Remind Mario"

Three kinds: ``immediate`` (fires when the file appears), ``one-shot`` (fires
once at ``at``) and ``periodic`` (a cron schedule in an IANA timezone).  Each
channel runs one event at a time with at most ``max_queued`` waiting.

The module reads top to bottom, parse -> judge -> schedule -> run: data
model and parsing, schedule arithmetic, the judge (what becomes of a valid
event, for the harness and --check alike), directory scanning (the scanner
and the directory's lock), the schedule (a heap of due times), the channels
(queues, worker pool, coroutine bridge), the history, the files (what each
one becomes; one writer thread changes them) and the watcher that joins
them, the agent's manual, the CLI.  Only croniter is needed beyond the
standard library, and only for periodic events; it is imported when the
first periodic event is parsed.
"""

from __future__ import annotations

import sys

if sys.platform == "win32":  # fcntl, /bin/sh, process groups and sessions
    raise ImportError("mom_events needs a POSIX system (fcntl, /bin/sh, process groups); it does not run on Windows")

import argparse
import binascii
import fcntl
import heapq
import importlib
import inspect
import io
import itertools
import json
import logging
import math
import os
import signal
import stat
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import IO, TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, TypeVar, TypeVarTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:  # imported where used: asyncio alone costs ~10 MB of memory
    import asyncio
    import selectors
    import subprocess

__all__ = ["Event", "EventError", "EventsWatcher", "events_prompt", "next_fire", "parse_event"]
__version__ = "0.1.0"

log = logging.getLogger("mom_events")

TYPES = ("immediate", "one-shot", "periodic")
# What the harness tells the agent about its files, by the type of the event
# it sends: not a file's own event, but a notice about one.
_NOTICES = {"rejected": "rejection notice", "missed": "missed-run notice"}
MAX_FILE_BYTES = 1024 * 1024

# The longest a field may be, in characters.  A channel ID is a chat
# service's short token (Slack's are about 11 characters, Discord's 19
# digits, a Matrix room ID at most 255 bytes); a cron schedule with every
# value of all six fields listed is 561; the longest IANA timezone name is
# 32.  Anything longer is a mistake, or a file out to make the harness keep
# megabytes per channel or per cached schedule.  A file name needs no check
# in the watcher: Linux filesystems allow at most 255 bytes, which is at most
# 255 characters; parse_event holds the names it is given to the same.
_MAX_LENGTH = {"channelId": 255, "schedule": 1000, "timezone": 64}
_MAX_NAME = 255

# git's "racy timestamp" problem: a file (or directory) looked at less than
# one timestamp tick after it was changed may change again within that tick
# without its stat changing, so it is looked at again on the next scan until
# that is older.  A change is the ctime, which every write (and a directory's
# every new, deleted or renamed name) sets to the clock's now, where an mtime
# can be set to any time (touch -d, cp -p).  Filesystems that stamp whole
# seconds (FAT every 2 s, ext3, HFS+) get the coarsest tick; the others stamp
# from the kernel's coarse clock, a few ms per tick, and get a generous 50 ms.
_TICK_NS = 2_000_000_000
_FINE_TICK_NS = 50_000_000

# The sweep stats every known file in turn for in-place rewrites (the
# directory's mtime does not change for those), in a batch every _SWEEP_EVERY.
# A pass over all of them takes one batch while that costs at most
# _SWEEP_SHARE of a core, and stretches to keep to that share, but to no more
# than _SWEEP_PERIOD, unless keeping to that would cost more than
# _SWEEP_MAX_SHARE: then it stretches to keep to that share instead.  At 10,000
# idle files, that pace cost 0.85 % of a core, and a pass every _SWEEP_PERIOD
# 2.96 % (the target is 1 %), measured side by side.
_SWEEP_EVERY = 0.2  # seconds
_SWEEP_SHARE = 0.002
_SWEEP_PERIOD = 0.9  # seconds: a rewrite of one of 1,000 files is seen within a second
_SWEEP_MAX_SHARE = 0.004

# The scan's fast path: skip the listing while the directory's mtime says
# nothing was created, deleted or renamed.  Off, every tick stats every file
# (the naive poller that the benchmark compares against).
_FAST_SCAN = True

# The scheduler sleeps (the cheapest wait there is: a timed wait on a lock
# costs half as much again) at most this long at a time, so that stop() is
# noticed that soon whatever the poll interval.
_NAP = 0.25

# A standby tries the directory's lock this often.
_STANDBY_TRY = 0.2

# Precision: the scheduler wakes this long before a firing, makes sure a worker
# thread is waiting for it, and spins the rest (a timed wait wakes ~0.3 ms late
# on a virtual machine, and starting a thread costs as much again).
_LEAD = 0.001
# Workers are a pool that sizes itself: an idle worker waits this long for
# work before it goes.  While channels wait and every worker's callback has
# run longer than _SPAWN_AFTER (an agent's run takes seconds), one more worker
# starts; quick callbacks, as in a burst of events, need no more threads (on
# the GIL, more threads would only make them slower: 10,000 one-shots due in
# one second on 2,000 channels all ran within 0.50 s, and within 1.17 s without
# the wait, measured side by side).
_LINGER = 2.0
_SPAWN_AFTER = 0.02

# Due entries are handled this many at a time, the lock let go in between.
_BATCH = 64

# A command's session that must stop gets SIGTERM, SIGKILL this long after, and is given up
# on this long after that.
_KILL_AFTER = 5.0  # seconds
_KILL_WAIT = 2.0   # seconds

# Parse failures are retried after these delays: the writer may be mid-write.
_RETRY_DELAYS = (0.1, 0.2, 0.4)


# ---------------------------------------------------------------------------
# Data model and parsing
# ---------------------------------------------------------------------------


class EventError(ValueError):
    """A bad event file; ``str()`` is one line naming the file and the reason."""

    def __init__(self, filename: str | None, reason: str):
        if len(reason) > 300:  # every quoting site keeps to an excerpt; this is the backstop
            reason = reason[:300] + "…"
        super().__init__(f"{filename}: {reason}" if filename else reason)
        self.filename = filename
        self.reason = reason


class _NeedsCroniter(EventError):
    """A valid periodic event on a machine without croniter: keep the file."""


@dataclass(frozen=True, slots=True)
class Event:
    """One parsed event file, or a notice about one (``type`` "rejected" or
    "missed"), its ``text`` saying what happened.  ``at``, ``schedule`` and
    ``timezone`` are None where the file has no such field; they are kept
    exactly as written, because the agent recognises its own words.  An
    occurrence handed to the handler also carries ``due`` (when it was due,
    aware; None for an immediate) and, if it runs after its time, ``late``."""

    filename: str
    type: str
    channel_id: str
    text: str
    at: str | None = None
    schedule: str | None = None
    timezone: str | None = None
    late: float | None = None  # seconds after its due time that it runs, if it runs late
    due: datetime | None = None
    catch_up: bool = False  # periodic: run once, late, for what fell due while no harness ran
    every: str | None = None  # periodic: an interval instead of a schedule, as written ("90m")
    start: str | None = None  # periodic: no occurrence before it (an interval's first)
    until: str | None = None  # periodic: no occurrence after it
    span: str | None = None   # periodic, with every and schedule: how long each run of the schedule lasts ("for")

    @property
    def message(self) -> str:
        """What the agent is woken with: ``[EVENT:file:type:when] text``, and
        when the occurrence was due and how late it runs, if it has a due
        time: ``[EVENT:build.json:periodic:every 90m] (due 2027-03-14T09:30:00-04:00) text``."""
        when = _when(self)
        tag = f"{self.filename}:{self.type}" + (f":{when}" if when is not None else "")
        notes = [] if self.due is None else [f"due {self.due.isoformat(timespec='seconds')}"]
        if self.late is not None:
            notes.append(f"late by {_span(self.late)}")
        return f"[EVENT:{tag}] ({', '.join(notes)}) {self.text}" if notes else f"[EVENT:{tag}] {self.text}"


def _when(event: Event) -> str | None:
    """A one-shot's ``at`` or a periodic event's schedule (``every 90m``), as written."""
    if event.type == "one-shot":
        return event.at
    if event.type == "periodic":
        if event.every is None:
            return event.schedule
        return f"every {event.every}" if event.schedule is None else f"every {event.every} for {event.span} " \
                                                                     f"from {event.schedule}"
    return None


def _span(seconds: float) -> str:
    """A duration exact to the whole second, every nonzero unit in words:
    ``1 day 12 hours``, ``1 minute 30 seconds``.  Rounded to one unit, 36
    hours read back to a user as "1 day" would mislead."""
    rest = int(seconds)
    if rest < 1:
        return "less than a second"
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count > 1 else ''}")
    return " ".join(parts)


def _clip(text: str, limit: int = 40) -> str:
    """At most ``limit`` characters of ``text``: an error line quotes what was
    wrong, never a megabyte of it."""
    return text if len(text) <= limit else text[:limit] + "…"


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:20]} is too large")
    return value


def _decode_json(data: str | bytes, filename: str | None) -> object:
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_FILE_BYTES:
            raise EventError(filename, "file is larger than 1 MiB")
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EventError(filename, f"not valid UTF-8 (byte {exc.start})") from None
    elif len(data) > MAX_FILE_BYTES:
        raise EventError(filename, "file is larger than 1 MiB")
    data = data.removeprefix("\ufeff")
    try:
        return json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise EventError(filename, f"invalid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise EventError(filename, "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # NaN, Infinity, 1e999, a 5,000-digit integer
        reason = str(exc).split(";")[0]
        raise EventError(filename, f"invalid JSON: {reason}") from None


def _string_field(obj: dict[str, object], key: str, filename: str) -> str:
    if key not in obj:
        raise EventError(filename, f'missing field "{key}"')
    value = obj[key]
    if not isinstance(value, str):
        raise EventError(filename, f'"{key}" must be a string, not {_json_type(value)}')
    if not value.strip():
        raise EventError(filename, f'"{key}" is empty')
    _check_length(key, value, filename)
    return value


def _check_length(key: str, value: str, filename: str | None) -> None:
    """Refuse a field longer than its ``_MAX_LENGTH``, if it has one."""
    limit = _MAX_LENGTH.get(key)
    if limit is not None and len(value) > limit:
        raise EventError(filename, f'"{key}" is {len(value)} characters long (at most {limit})')


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _parse_instant(key: str, text: str, filename: str | None, zone: str | None = None) -> datetime:
    """An ISO 8601 date-time field as an aware instant.  Without an offset it
    is an error (the original read it as local time, silently), unless
    ``zone`` is given: then it is wall time there, and an offset given as
    well must be the one in force there at that instant."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise EventError(filename, f'"{key}" is not an ISO 8601 date-time: {_clip(text)!r}') from None
    try:
        if when.tzinfo is None or when.utcoffset() is None:
            if zone is None:
                wall = ', or give "timezone"' if key == "at" else ""
                raise EventError(filename, f'"{key}" has no UTC offset: {_clip(text)!r} (add one, e.g. +01:00 or '
                                           f"Z{wall})")
            return _wall_instant(_zone(zone), when)
        when.astimezone(UTC)
        there = None if zone is None else _utc_offset(when.astimezone(_zone(zone)))
    except OverflowError:  # 0001-01-01T00:00+01:00 is in year 0; 9999-12-31T23:59Z in Vienna, in 10000
        raise EventError(filename, f'"{key}" is out of range: {_clip(text)!r}') from None
    if there is not None and (offset := _utc_offset(when)) != there:
        raise EventError(filename, f'"{key}" {_clip(text)} has offset {_offset_text(offset)}, but {zone} is at '
                                   f"{_offset_text(there)} then")
    return when


# The fields each type reads.  Any other is ignored (bots add their own),
# and said so, unless it is one of these misspelt; one of another type's
# fields is an error.
_FIELDS = {
    "immediate": ("type", "channelId", "text"),
    "one-shot": ("type", "channelId", "text", "at", "timezone"),
    "periodic": ("type", "channelId", "text", "schedule", "every", "for", "timezone", "start", "until", "catchUp"),
}
_ALL_FIELDS = {key for fields in _FIELDS.values() for key in fields}


def parse_event(data: str | bytes, filename: str) -> Event:
    """Parse and validate one event file's content; raise EventError."""
    return _parse(data, filename)[0]


def _parse(data: str | bytes, filename: str) -> tuple[Event, _Timing, list[str]]:
    """``parse_event``, with when the event runs (read once, here) and the
    fields it ignored."""
    if len(filename) > _MAX_NAME:
        raise EventError(_clip(filename), f"the file name is {len(filename)} characters long "
                                          f"(at most {_MAX_NAME}, as on Linux filesystems)")
    obj = _decode_json(data, filename)
    if not isinstance(obj, dict):
        raise EventError(filename, f"expected a JSON object, not {_json_type(obj)}")
    for key in obj:
        if key not in _ALL_FIELDS and (meant := _resembled(key)) is not None:
            owners = " and ".join(t for t in TYPES if meant in _FIELDS[t])
            whose = "" if obj.get("type") not in TYPES or meant in _FIELDS[obj["type"]] else \
                f' ("{meant}" is for {owners} events)'
            raise EventError(filename, f"unknown field {json.dumps(_clip(key), ensure_ascii=False)}: "
                                       f'did you mean "{meant}"?{whose}')
    if "type" not in obj:
        raise EventError(filename, 'missing field "type"')
    kind = obj["type"]
    if not isinstance(kind, str):
        raise EventError(filename, f'"type" must be a string, not {_json_type(kind)}')
    if kind not in TYPES:
        raise EventError(filename, f'unknown type {_clip(kind)!r} (expected "immediate", "one-shot" or "periodic")')
    for key in obj:
        if key in _ALL_FIELDS and key not in _FIELDS[kind]:
            owners = " and ".join(t for t in TYPES if key in _FIELDS[t])
            raise EventError(filename, f'"{key}" is for {owners} events, not {kind} ones')
    ignored = [key for key in obj if key not in _ALL_FIELDS]
    channel_id = _string_field(obj, "channelId", filename)
    if (fault := _channel_fault(channel_id)) is not None:  # printed, a line could be forged
        raise EventError(filename, f'"channelId" {_clip(channel_id)!r} {fault}')
    text = _string_field(obj, "text", filename)
    zone = _optional_string(obj, "timezone", filename)
    try:
        if zone is not None:
            _zone(zone)
        if kind == "immediate":
            return Event(filename, kind, channel_id, text), _ON_ARRIVAL, ignored
        if kind == "one-shot":
            at = _string_field(obj, "at", filename)
            instant, wall = _parse_instant("at", at, filename, zone), datetime.fromisoformat(at)
            timing = _Once(instant, None if zone is None or wall.tzinfo is not None else (zone, wall))
            return Event(filename, kind, channel_id, text, at=at, timezone=zone), timing, ignored
        return *_periodic(obj, filename, channel_id, text, zone), ignored
    except _CronError as exc:
        raise (_NeedsCroniter if exc.needs_croniter else EventError)(filename, str(exc)) from None


def _resembled(key: str) -> str | None:
    """The known field that an unknown ``key`` is a near miss of, if any: the
    same but for case, ``_`` and ``-`` (``catchup``, ``channel_id``), or, for
    a field of 5 letters or more, one letter added, dropped, changed or
    swapped with the next (``untill``, ``evrey``).  Further off it is a bot's
    own key (``state``, ``channels``, ``timeZoneId``)."""
    typed, known = key.lower().replace("_", "").replace("-", ""), sorted(_ALL_FIELDS)
    return next((name for name in known if typed == name.lower()),
                next((name for name in known if len(name) >= 5 and _one_edit(typed, name.lower())), None))


def _one_edit(a: str, b: str) -> bool:
    """Is ``a`` one letter added to, dropped from, changed in or swapped with
    the next in ``b``?"""
    if len(a) < len(b):
        a, b = b, a
    if len(a) - len(b) > 1 or a == b:
        return False
    at = next((i for i in range(len(b)) if a[i] != b[i]), len(b))  # the first difference
    if len(a) > len(b):
        return a[at + 1:] == b[at:]
    return a[at + 1:] == b[at + 1:] or a[at:at + 2] == b[at:at + 2][::-1] and a[at + 2:] == b[at + 2:]


def _periodic(obj: dict[str, object], filename: str, channel_id: str, text: str,
              zone: str | None) -> tuple[Event, _Timing]:
    catch_up = obj.get("catchUp", False)
    if not isinstance(catch_up, bool):
        raise EventError(filename, f'"catchUp" must be true or false, not {_json_type(catch_up)}')
    start, until = _optional_string(obj, "start", filename), _optional_string(obj, "until", filename)
    begins = _parse_instant("start", start, filename) if start is not None else None
    ends = _parse_instant("until", until, filename) if until is not None else None
    if start is not None and until is not None and begins is not None and ends is not None and ends <= begins:
        raise EventError(filename, f'"until" {_clip(until)} is not after "start" {_clip(start)}')
    if "schedule" not in obj and "every" not in obj:
        raise EventError(filename, 'missing field "schedule" (or "every", for an interval such as "90m")')
    every, span = _optional_string(obj, "every", filename), _optional_string(obj, "for", filename)
    schedule = _optional_string(obj, "schedule", filename)
    step = width = None
    if every is not None:
        step = _interval(every, filename)
        if schedule is not None and span is None:
            raise EventError(filename, '"every" with "schedule" needs "for": how long each run of the schedule '
                                       'lasts, such as "8h"')
        if span is not None and step > (width := _interval(span, filename, "for")):
            raise EventError(filename, f'"every" {_clip(every)} is longer than "for" {_clip(span)}: each run of the '
                                       'schedule would run once (leave out "every" and "for")')
    if span is not None and (every is None or schedule is None):
        raise EventError(filename, '"for" goes with "every" and "schedule" both: every so long, for so long, '
                                   "from each run of the schedule")
    if schedule is not None:
        if zone is None:
            raise EventError(filename, 'missing field "timezone" (an IANA name such as Europe/Vienna)')
        _compile_cron(schedule)
    timing = _periodic_timing(schedule, zone, step, width,
                              -math.inf if begins is None else begins.timestamp(),
                              math.inf if ends is None else ends.timestamp())
    return Event(filename, "periodic", channel_id, text, schedule=schedule, timezone=zone, catch_up=catch_up,
                 every=every, start=start, until=until, span=span), timing


# Characters that print as a blank, though neither whitespace nor unprintable to
# Python: the Hangul and braille fillers.
_BLANKS = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def _channel_fault(channel: str) -> str | None:
    """What is wrong with a channel ID that could end the CLI's channel field,
    or look as if it did, so that a line could be forged: whitespace, or a
    character that does not print, or prints as a blank."""
    for char in channel:
        if char.isspace():
            return "contains whitespace (a chat platform's channel ID has none)"
        if not char.isprintable() or char in _BLANKS:
            return f"contains U+{ord(char):04X}, which does not print (a chat platform's channel ID has none)"
    return None


def _optional_string(obj: dict[str, object], key: str, filename: str) -> str | None:
    return _string_field(obj, key, filename) if key in obj else None


_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MAX_INTERVAL = 3650 * 86400  # ten years


def _interval(every: str, filename: str | None = None, key: str = "every") -> int:
    """An interval such as ``90m`` or ``1h30m`` in seconds: whole numbers of
    d, h, m and s, each unit at most once, in that order."""
    rest, total, units = every, 0, list(_UNITS)
    while rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        unit = rest[digits:digits + 1]
        if not digits or unit not in units or len(rest[:digits].lstrip("0")) > 12:
            raise EventError(filename, f'"{key}" {_clip(every)!r} is not an interval such as 90m, 1h30m or 2d '
                                       "(units d, h, m, s)")
        total += int(rest[:digits]) * _UNITS[unit]
        units = units[units.index(unit) + 1:]
        rest = rest[digits + 1:]
    if not 1 <= total <= _MAX_INTERVAL:
        raise EventError(filename, f'"{key}" {_clip(every)!r} must be at least 1 s and at most ten years')
    return total


def _past_reason(written: str, when: datetime, now: float) -> str:
    """Why a one-shot written after its (valid) ``at`` is rejected, with the
    time now at the same offset: a wrong year or a UTC time written with a
    local offset shows at a glance."""
    return (f'"at" {_clip(written)} is {_span(now - when.timestamp())} in the past '
            f"(it is now {datetime.fromtimestamp(now, when.tzinfo).isoformat(timespec='seconds')})")


_WRITTEN = ("type", "channelId", "at", "schedule", "timezone")


def _as_written(data: str | bytes) -> dict[str, str]:
    """What a file that failed validation says of itself, as far as it can
    be read: its string fields among ``_WRITTEN`` that are no longer than a
    valid one could be, to tell the agent and the history."""
    try:
        obj = _decode_json(data, None)
    except EventError:
        return {}
    if not isinstance(obj, dict):
        return {}
    return {key: value for key in _WRITTEN
            if isinstance(value := obj.get(key), str) and len(value) <= _MAX_LENGTH.get(key, 64)}


def _rejected_event(filename: str, reason: str, written: dict[str, str], fate: str) -> Event | None:
    """The event that tells the agent, on the channel its file names, that
    the file was rejected, why, and what became of it; None without one."""
    channel = written.get("channelId", "")
    if not channel or _channel_fault(channel):  # none, or not a channel: the file says nothing to tell
        return None
    return Event(filename, "rejected", channel, f"{reason.rstrip('.')}. {fate}",
                 at=written.get("at"), schedule=written.get("schedule"), timezone=written.get("timezone"))


# ---------------------------------------------------------------------------
# Schedule arithmetic: cron in an IANA timezone, with classic cron's DST rules
# ---------------------------------------------------------------------------


class _CronError(ValueError):
    """A bad schedule or timezone, before a filename is attached."""

    def __init__(self, reason: str, needs_croniter: bool = False):
        super().__init__(reason)
        self.needs_croniter = needs_croniter


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    """The zone, cached.  Only real zones' names are kept (a call that raises
    caches nothing), and ZoneInfo accepts only normalized names of the
    tzdata files, so the cache stays small whatever files say."""
    if not name.strip():
        raise _CronError('"timezone" is empty')
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _CronError(f"unknown timezone {_clip(name)!r} (expected an IANA name such as Europe/Vienna)") from None


_MONTHS = {m: i for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
_WEEKDAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int]
    size: int  # how many distinct values: the largest sensible step


_SECOND = _FieldSpec("second", 0, 59, {}, 60)
_MINUTE = _FieldSpec("minute", 0, 59, {}, 60)
_HOUR = _FieldSpec("hour", 0, 23, {}, 24)
_DOM = _FieldSpec("day-of-month", 1, 31, {}, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTHS, 12)
_DOW = _FieldSpec("day-of-week", 0, 7, _WEEKDAYS, 7)  # 0 and 7 are Sunday
_YEAR = _FieldSpec("year", 1, 9999, {}, 9999)  # croner's range, and datetime's

_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _number(text: str) -> int | None:
    """A whole number written in ASCII digits; None for anything else.  Long
    ones are read only as far as needed: Python refuses to convert 4,300 digits."""
    if not (text.isdigit() and text.isascii()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 9 else 10 ** 9


def _field_value(text: str, spec: _FieldSpec) -> int:
    value = _number(text)
    if value is None:
        if text.lower() in spec.names:
            return spec.names[text.lower()]
        upper, hint = text.upper(), ""
        if "#" in upper:
            hint = " ('#' belongs in day-of-week)"
        elif upper.endswith("W"):
            hint = " ('W' belongs in day-of-month)"
        elif upper.endswith("L"):
            hint = " ('L' belongs in day-of-month or day-of-week)"
        raise _CronError(f"{_clip(text)!r} is not a valid {spec.name} value{hint}")
    if not spec.low <= value <= spec.high:
        raise _CronError(f"{spec.name} {_clip(text, 12)} is out of range {spec.low}-{spec.high}")
    return value


def _items(text: str, spec: _FieldSpec) -> list[str]:
    items = text.split(",")
    if "" in items:
        raise _CronError(f"empty list item in the {spec.name} field {_clip(text)!r}")
    return items


def _values(item: str, spec: _FieldSpec) -> range | set[int]:
    """The values of one plain list item: a number or name, a range, a step,
    or ``*`` (croner's ``?`` is the same).  Sunday comes out as 0."""
    body, slash, step_text = item.partition("/")
    step = 1
    if slash:
        number = _number(step_text)
        if not number:
            raise _CronError(f"{_clip(item)!r}: the step must be a positive whole number")
        if number > spec.size:
            raise _CronError(f"{_clip(item)!r}: step {_clip(step_text, 12)} is larger than the {spec.name} field")
        step = number
    if body in ("*", "?"):
        low, high = spec.low, spec.high
        if spec is _YEAR and slash:
            low = 0  # croner steps years from 0: */2 is the even years
    elif "-" in body:
        first, _, last = body.partition("-")
        low, high = _field_value(first, spec), _field_value(last, spec)
        if spec is _DOW and high == 0 and low > 0:  # "fri-sun" ends on Sunday, 7
            high = 7
        if low > high:
            raise _CronError(f"{_clip(item)!r}: wrapping ranges are not supported "
                             f"(split it: {first}-{spec.high},{spec.low}-{last})")
    else:
        low = _field_value(body, spec)
        high = spec.high if slash else low  # "a/n" runs to the field's last value (Sunday, 7, for days)
    values = range(low, high + 1, step)
    return {day % 7 for day in values} if spec is _DOW else values


def _field(text: str, spec: _FieldSpec) -> set[int]:
    return set().union(*(_values(item, spec) for item in _items(text, spec)))


def _plain_list(text: str, spec: _FieldSpec) -> str:
    """A field spelled as croniter reads it right, and quickly: ``*`` or a
    plain list of its values."""
    values = _field(text, spec)
    return "*" if len(values) == spec.size else ",".join(map(str, sorted(values)))


def _unrestricted(text: str) -> bool:
    """cron(8)'s test of a day field, which decides how the two combine: one
    whose text starts with ``*`` (or croner's ``?``) does not restrict."""
    return text.startswith(("*", "?"))


def _month_shape(year: int, month: int) -> tuple[int, int]:
    """The weekday of a month's 1st (Sunday 0) and its number of days."""
    first = datetime(year, month, 1)
    length = 31 if month == 12 else (first.replace(month=month + 1) - first).days
    return (first.weekday() + 1) % 7, length


def _nearest_weekday(day: int, first: int, length: int) -> int | None:
    """croner's ``nW``: the Monday to Friday nearest ``day`` without leaving
    its month (a Saturday 1st gives Monday the 3rd, a Sunday last day the
    Friday before); None in a month that has no such day."""
    if day > length:
        return None
    weekday = (first + day - 1) % 7
    if weekday == 6:
        return day - 1 if day > 1 else day + 2
    if weekday == 0:
        return day + 1 if day < length else day - 2
    return day


class _Days:
    """Which days of a month match.  The two day fields combine by cron(8)'s
    rule: when both are restricted (``_unrestricted``), a day matching either
    matches, otherwise both must match, as croner's ``+`` before day-of-week
    also asks.  Beside numbers, ranges and steps, day-of-month takes ``L``
    (the last day), ``LW`` (the last weekday) and ``nW`` (the weekday nearest
    day n), day-of-week ``n#k`` (the k-th weekday n of the month) and ``n#L``
    or ``nL`` (the last), as croner reads them.  A month's days depend only
    on the weekday of its 1st and its length, so each answer is kept."""

    def __init__(self, dom: str, dow: str):
        both = dow.startswith("+")
        if both:
            dow = dow[1:]
            if not dow:
                raise _CronError("'+' must be followed by the day-of-week, as in +MON")
        self.either = not both and not _unrestricted(dom) and not _unrestricted(dow)
        self.dom: set[int] = set()
        self.last = self.last_weekday = False
        self.nearest: set[int] = set()
        for item in _items(dom, _DOM):
            upper = item.upper()
            if upper == "L":
                self.last = True
            elif upper == "LW":
                self.last_weekday = True
            elif upper.endswith("W"):
                if _number(item[:-1]) is None:
                    raise _CronError(f"{_clip(item)!r}: 'W' follows a single day, as in 15W")
                self.nearest.add(_field_value(item[:-1], _DOM))
            elif upper.endswith("L"):
                raise _CronError(f"{_clip(item)!r}: in day-of-month 'L' stands alone (the last day) or as LW")
            else:
                self.dom.update(_values(item, _DOM))
        self.weekdays: set[int] = set()
        self.nth: set[tuple[int, object]] = set()  # (weekday, k): k is 1-5, or "L" for the last
        for item in _items(dow, _DOW):
            days, sharp, nth = item.partition("#")
            if not sharp and item.upper().endswith("L"):
                days, nth = item[:-1], "L"
            elif not sharp:
                self.weekdays.update(_values(item, _DOW))
                continue
            if not days:
                raise _CronError(f"{_clip(item)!r}: a day comes first, as in FRI#2, FRI#L or 5L")
            nth = nth.upper()
            if nth != "L" and _number(nth) not in range(1, 6):
                raise _CronError(f"{_clip(item)!r}: the number after '#' must be 1 to 5")
            self.nth |= {(day, nth if nth == "L" else int(nth)) for day in _values(days, _DOW)}
        self._by_shape: dict[tuple[int, int], tuple[int, ...]] = {}

    def in_month(self, year: int, month: int) -> tuple[int, ...]:
        shape = _month_shape(year, month)
        days = self._by_shape.get(shape)
        if days is None:
            days = self._by_shape[shape] = tuple(day for day in range(1, shape[1] + 1) if self._matches(day, *shape))
        return days

    def _matches(self, day: int, first: int, length: int) -> bool:
        weekday = (first + day - 1) % 7
        by_date = (day in self.dom or (self.last and day == length)
                   or (self.last_weekday and day == _nearest_weekday(length, first, length))
                   or any(_nearest_weekday(n, first, length) == day for n in self.nearest))
        by_weekday = (weekday in self.weekdays or (weekday, (day - 1) // 7 + 1) in self.nth
                      or (day + 7 > length and (weekday, "L") in self.nth))
        return (by_date or by_weekday) if self.either else (by_date and by_weekday)


class _CronTimes(Protocol):
    """What is used of a croniter: the next matching time of day."""

    def get_next(self, ret_type: type[datetime], start_time: datetime) -> datetime: ...


class _Cron:
    """A validated cron expression, plus the DST rules.

    Days, months and years are matched here (``_Days``); croniter, given
    the seconds, minutes and hours as plain lists, finds the time of day.
    croniter's own reading of the day fields is wrong or missing for much
    that agents write: cron(8)'s either-field rule with ``n#k``, croner's
    ``5L``, ``n#L`` and ``LW``, ``31W`` in a short month, a year more than 50
    years ahead.  Seven fields add the year, after seconds, as croner reads
    them; croner's ``?`` is ``*`` everywhere.

    A *wildcard* job (minute or hour starts with ``*``) runs at the real
    instants whose local time matches.  A *fixed-time* job runs a time that
    falls in a spring-forward gap once, at the first instant after the gap,
    and a time in a repeated fall-back hour only on the first pass.
    """

    def __init__(self, expression: str):
        text = " ".join(expression.split())
        text = _MACROS.get(text.lower(), text)
        if text.startswith("@"):
            raise _CronError(f"unknown macro {_clip(text)!r} (expected one of {', '.join(sorted(_MACROS))})")
        fields = text.split(" ")
        if not 5 <= len(fields) <= 7:
            raise _CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), "
                             f"6 (seconds first) or 7 (seconds first, year last), found {len(fields)}")
        if len(fields) == 5:
            fields.insert(0, "0")
        if len(fields) == 6:
            fields.append("*")
        second, minute, hour, dom, month, dow, year = fields
        self.times = " ".join(_plain_list(value, spec) for value, spec in
                              ((second, _SECOND), (minute, _MINUTE), (hour, _HOUR)))
        self.days = _Days(dom, dow)
        self.months = sorted(_field(month, _MONTH))
        # None for every year; else ranges, not a set that could hold 9,999 years
        self.years = None if year in ("*", "?") else [_values(item, _YEAR) for item in _items(year, _YEAR)]
        self.wildcard = _unrestricted(minute) or _unrestricted(hour)
        self._lock = threading.Lock()
        self._times: _CronTimes | None = None
        self._memo: tuple[tuple[ZoneInfo, datetime], datetime] | None = None

    def bind(self) -> None:
        """Attach croniter and make sure the pattern ever fires."""
        try:
            # Imported by name: croniter ships no types, and this way the module type-checks
            # whether or not a stub package for it is installed; _CronTimes is what is used of it.
            croniter: Callable[..., _CronTimes] = importlib.import_module("croniter").croniter
        except ImportError:
            raise _CronError("periodic events need croniter (pip install croniter)", needs_croniter=True) from None
        try:
            self._times = croniter(f"{self.times} * * *", datetime(2001, 1, 1), second_at_beginning=True)
        except (ValueError, KeyError, TypeError) as exc:
            raise _CronError(f"croniter rejects it: {str(exc)[:200]}") from None
        try:
            self.match_after(datetime(2001, 1, 1))
        except _CronError:
            raise _CronError("it never fires") from None

    def match_after(self, wall: datetime) -> datetime:
        """The first naive local time strictly after ``wall`` that matches."""
        times = self._times
        if times is None:
            raise RuntimeError("bind() comes first")  # _compile_cron binds every _Cron it makes
        with self._lock:
            for day in self._days_from(wall):
                start = wall if day.date() == wall.date() else day - timedelta(seconds=1)
                try:
                    candidate = times.get_next(datetime, start_time=start)
                except (ValueError, OverflowError):  # past the year 9999
                    break
                if candidate.date() == day.date():
                    return candidate
        raise _CronError(f"it has no time after {wall:%Y-%m-%d %H:%M:%S}")

    def _days_from(self, wall: datetime) -> Iterator[datetime]:
        """The matching days from ``wall``'s on, in order, as midnights.  The
        calendar repeats every 400 years, so a year in the same place of that
        cycle as one already searched in full is skipped: a pattern that
        never fires is known as such after 400 years' search, not 8,000."""
        searched = set()
        for year in range(wall.year, _YEAR.high + 1):
            if year % 400 in searched or (self.years is not None and not any(year in r for r in self.years)):
                continue
            for month in self.months:
                for day in self.days.in_month(year, month):
                    if (year, month, day) >= (wall.year, wall.month, wall.day):
                        yield datetime(year, month, day)
            if year > wall.year:  # the first year was searched from wall's day only
                searched.add(year % 400)

    def next_after(self, tz: ZoneInfo, after: datetime) -> datetime:
        """The first instant strictly after ``after`` that matches in ``tz``.
        The last answer is kept: a start-up judges every file at one instant,
        and files share a handful of schedules."""
        after = after.astimezone(UTC)
        memo = self._memo
        if memo is not None and memo[0] == (tz, after):
            return memo[1]
        best = self._next_after(tz, after)
        self._memo = ((tz, after), best)
        return best

    def _next_after(self, tz: ZoneInfo, after: datetime) -> datetime:
        local = after.astimezone(tz)
        wall = local.replace(tzinfo=None)
        off0, off1 = _offsets(tz, wall)
        if off0 <= off1:
            return self._first_pass(tz, wall, after)
        # ``after`` lies in a repeated (fall-back) hour: walls [a, b) occur twice.
        span = off0 - off1
        moment = _transition(tz, after - span, after + span)
        a, b = _naive(moment + off1), _naive(moment + off0)
        if local.fold == 0:
            first, second = wall, a - _US
        else:
            first, second = b - _US, wall
        best = self._first_pass(tz, first, after)
        if self.wildcard:
            candidate = self.match_after(second)
            if candidate < b:
                repeat = (candidate - off1).replace(tzinfo=UTC)
                if after < repeat < best:
                    best = repeat
        return best

    def _first_pass(self, tz: ZoneInfo, wall: datetime, after: datetime) -> datetime:
        """Runs in wall-clock order, reading every repeated time as its first pass."""
        for _ in range(1000):
            candidate = self.match_after(wall)
            off0, off1 = _offsets(tz, candidate)
            if off0 < off1:  # the candidate falls in a spring-forward gap
                moment = _transition(tz, _utc(candidate - off1), _utc(candidate - off0))
                if not self.wildcard and moment > after:
                    return moment
                wall = _naive(moment + off1) - _US  # skip to the end of the gap
                continue
            instant = _utc(candidate - off0)
            if instant > after:
                return instant
            wall = candidate
        raise _CronError("no occurrence found")  # unreachable for a valid pattern


_US = timedelta(microseconds=1)


def _utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)


def _naive(instant: datetime) -> datetime:
    return instant.replace(tzinfo=None)


def _offsets(tz: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets of a naive wall time read as first and as second pass:
    equal for an ordinary time, off0 > off1 for a repeated one, off0 < off1
    for a time in a gap (PEP 495)."""
    return (_utc_offset(wall.replace(tzinfo=tz, fold=0)), _utc_offset(wall.replace(tzinfo=tz, fold=1)))


def _utc_offset(when: datetime) -> timedelta:
    """An aware datetime's UTC offset (its zone, a ZoneInfo or a fixed offset, always gives one)."""
    offset = when.utcoffset()
    if offset is None:
        raise ValueError(f"{when!r} is naive: it has no UTC offset")
    return offset


def _wall_instant(tz: ZoneInfo, wall: datetime) -> datetime:
    """A naive wall time in ``tz`` as an aware instant there, as a fixed-time
    cron job reads it: in a spring-forward gap, the first instant after the
    gap; in a repeated hour, its first pass."""
    off0, off1 = _offsets(tz, wall)
    if off0 < off1:
        moment = _transition(tz, _utc(wall - off1), _utc(wall - off0))
    else:
        moment = _utc(wall - off0)
    return moment.astimezone(tz)


def _transition(tz: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The single offset change in (low, high], to the second, by bisection."""
    target = high.astimezone(tz).utcoffset()
    lo, hi = math.floor(low.timestamp()), math.ceil(high.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def _hm(wall: datetime) -> str:
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def _wall_note(name: str, wall: datetime) -> str | None:
    """What daylight saving does to a wall time in zone ``name``, said aloud:
    a time that does not exist runs at the end of the gap, a time that
    happens twice on its first pass (see _wall_instant)."""
    tz = _zone(name)
    off0, off1 = _offsets(tz, wall)
    if off0 < off1:
        moment = _wall_instant(tz, wall).astimezone(UTC)  # the gap's end
        before, after = _naive(moment + off0), _naive(moment + off1)
        return (f"{_hm(wall)} does not exist on {wall.date()} in {name} (clocks go from {_hm(before)} to "
                f"{_hm(after)}): runs at {_hm(after)} {moment.astimezone(tz).tzname()}")
    if off0 > off1:
        return f"{_hm(wall)} happens twice on {wall.date()} in {name}: runs at the first ({_tz_name(tz, wall, 0)})"
    return None


def _tz_name(tz: ZoneInfo, wall: datetime, fold: int) -> str:
    return wall.replace(tzinfo=tz, fold=fold).tzname() or str(tz)


@lru_cache(maxsize=64)
def _transitions(name: str, day: int) -> tuple[tuple[datetime, timedelta, timedelta], ...]:
    """Zone ``name``'s offset changes in the year from day ``day`` (days since
    the epoch): (moment, offset before, offset after).  Daily offsets are
    compared, then each change is found to the second."""
    tz, found = _zone(name), []
    before = datetime.fromtimestamp(day * 86400, tz).utcoffset()
    for later in range(day + 1, day + 367):
        offset = datetime.fromtimestamp(later * 86400, tz).utcoffset()
        if offset != before and offset is not None and before is not None:
            low, high = datetime.fromtimestamp((later - 1) * 86400, UTC), datetime.fromtimestamp(later * 86400, UTC)
            found.append((_transition(tz, low, high), before, offset))
        before = offset
    return tuple(found)


@lru_cache(maxsize=1024)
def _cron_notes(expression: str, name: str, day: int) -> tuple[tuple[float, str], ...]:
    """What daylight saving does to a cron schedule in zone ``name`` in the
    year from day ``day``, said aloud (the rules at _Cron), with the moment
    of each change: a fixed time of day that does not exist runs at the end
    of the gap, one that happens twice runs on its first pass; a wildcard job
    skips the gap and runs in both passes."""
    cron, tz, notes = _compile_cron(expression), _zone(name), []
    for moment, before, after in _transitions(name, day):
        low, high = sorted((_naive(moment + before), _naive(moment + after)))  # the walls skipped, or repeated
        try:
            wall = cron.match_after(low - _US)
        except _CronError:  # its years are over
            break
        if wall >= high:
            continue
        first, second = _tz_name(tz, low, 0), _tz_name(tz, low, 1)
        if after > before and cron.wildcard:
            note = f"on {low.date()} clocks go from {_hm(low)} to {_hm(high)} in {name}: it does not run in between"
        elif after > before:
            note = (f"{_hm(wall)} does not exist on {low.date()} in {name} (clocks go from {_hm(low)} to "
                    f"{_hm(high)}): that day it runs at {_hm(high)} {_tz_name(tz, high, 0)}")
        elif cron.wildcard:
            note = (f"{_hm(low)} to {_hm(high)} happen twice on {low.date()} in {name}: it runs in both passes "
                    f"({first}, then {second})")
        else:
            note = f"{_hm(wall)} happens twice on {low.date()} in {name}: that day it runs at the first ({first})"
        notes.append((moment.timestamp(), note))
    return tuple(notes)


@lru_cache(maxsize=1024)
def _compile_cron(expression: str) -> _Cron:
    """Validated, bound and cached: many files share a handful of schedules.
    The cache is keyed on the text as written, so its size is bounded by
    the callers: parse_event and next_fire refuse a schedule longer than
    _MAX_LENGTH (a valid one could otherwise be a megabyte of spaces or
    repeated list items), and an invalid one is never cached.  1024 of the
    longest hold about 5 MB."""
    try:
        cron = _Cron(expression)
        cron.bind()
    except _CronError as exc:
        if exc.needs_croniter:
            raise
        raise _CronError(f"bad schedule {_clip(expression)!r}: {exc}") from None
    return cron


def next_fire(schedule: str, timezone: str, after: datetime) -> datetime:
    """The next occurrence of a cron ``schedule`` in IANA ``timezone`` strictly
    after the aware datetime ``after``, as an aware datetime in that timezone.
    A bad schedule or timezone raises EventError."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("next_fire needs an aware datetime for 'after'")
    _check_length("schedule", schedule, None)
    _check_length("timezone", timezone, None)
    try:
        tz = _zone(timezone)
        return _compile_cron(schedule).next_after(tz, after).astimezone(tz)
    except _CronError as exc:
        raise EventError(None, str(exc)) from None


_LAST_INSTANT = datetime(9999, 12, 31, tzinfo=UTC).timestamp()  # datetime's end, with a day to spare


def _in_windows(cron: _Cron, tz: ZoneInfo, step: int, span: int, after: float) -> float:
    """The first run strictly after ``after`` of ``every`` restarted at each
    run of a schedule for a span: each run S of the cron opens a window that
    runs at S, S + step, ... up to S + span included (elapsed time, as
    ``every`` is).  Windows still open at ``after`` are those opened in the
    span before it; the first window to open after it is the last candidate."""
    best, opening = math.inf, cron.next_after(tz, datetime.fromtimestamp(after - span, UTC))
    while (start := opening.timestamp()) <= after:
        due = start + step * (math.floor((after - start) / step) + 1)
        if due <= start + span:
            best = min(best, due)
        opening = cron.next_after(tz, opening)
    return min(best, start)


class _Timing:
    """When a valid event runs, read once by the parser so that nothing
    after it parses a time again: the judge, the schedule, --check and the
    manual ask it.  This one is an immediate event's: on arrival, at no time."""

    __slots__ = ()

    def next_after(self, now: float, mtime: float) -> float:
        """The first run strictly after ``now``, of the event in a file
        written at ``mtime``; infinity when none is left."""
        return math.inf

    def clock(self, user: tzinfo | None) -> tzinfo | None:
        """The zone its due times are told in: its own, or else the
        ``user``'s (None: the host's)."""
        return user

    def note(self, now: float) -> str | None:
        """What daylight saving next does to its times, said aloud."""
        return None


class _Once(_Timing):
    """A one-shot's ``at``; ``wall``, when it was written without an offset:
    the zone and the wall time there, for what daylight saving does to it."""

    __slots__ = ("at", "due", "wall")

    def __init__(self, at: datetime, wall: tuple[str, datetime] | None) -> None:
        self.at, self.due, self.wall = at, at.timestamp(), wall

    def next_after(self, now: float, mtime: float) -> float:
        return self.due if self.due > now else math.inf

    def clock(self, user: tzinfo | None) -> tzinfo | None:
        return self.at.tzinfo  # the offset written, or the zone a wall time was read in

    def note(self, now: float) -> str | None:
        return None if self.wall is None else _wall_note(*self.wall)


class _Periodic(_Timing):
    """A periodic event's runs: none before ``since`` (its ``start``), nor
    after ``until``, nor past datetime's years."""

    __slots__ = ("since", "until")

    def __init__(self, since: float, until: float) -> None:
        self.since, self.until = since, until

    def next_after(self, now: float, mtime: float) -> float:
        due = self._next(now, mtime)
        return math.inf if due > self.until or due >= _LAST_INSTANT else due

    def _next(self, now: float, mtime: float) -> float:
        raise NotImplementedError  # pragma: no cover (each kind has its own)


class _Every(_Periodic):
    """``every``: runs at ``start``, ``start + every``, ... or, without a
    start, one, two, ... intervals after the file's mtime, so that a restart
    keeps the phase and a rewrite starts anew.  Its due times are told in
    its ``timezone``, if it has one."""

    __slots__ = ("step", "tz")

    def __init__(self, since: float, until: float, step: int, tz: ZoneInfo | None) -> None:
        super().__init__(since, until)
        self.step, self.tz = step, tz

    def _next(self, now: float, mtime: float) -> float:
        first = self.since if math.isfinite(self.since) else mtime + self.step
        return first + self.step * max(0, math.floor((now - first) / self.step) + 1)

    def clock(self, user: tzinfo | None) -> tzinfo | None:
        return user if self.tz is None else self.tz


class _OnCron(_Periodic):
    """A cron ``schedule`` in its ``timezone``, from ``start`` included."""

    __slots__ = ("cron", "schedule", "timezone", "tz")

    def __init__(self, since: float, until: float, cron: _Cron, schedule: str, timezone: str) -> None:
        super().__init__(since, until)
        self.cron, self.schedule, self.timezone, self.tz = cron, schedule, timezone, _zone(timezone)

    def _next(self, now: float, mtime: float) -> float:
        try:
            return self._after(max(now, self.since - 1e-6))
        except _CronError:  # its years are over
            return math.inf

    def _after(self, after: float) -> float:
        return self.cron.next_after(self.tz, datetime.fromtimestamp(after, UTC)).timestamp()

    def clock(self, user: tzinfo | None) -> tzinfo | None:
        return self.tz

    def note(self, now: float) -> str | None:
        since = max(now, self.since)  # the next such day, within a year
        notes = _cron_notes(self.schedule, self.timezone, math.floor(since / 86400))
        return next((note for moment, note in notes if since <= moment <= self.until), None)


class _Window(_OnCron):
    """``every`` so long, ``for`` so long (``span``), from each run of a schedule."""

    __slots__ = ("step", "span")

    def __init__(self, since: float, until: float, cron: _Cron, schedule: str, timezone: str,
                 step: int, span: int) -> None:
        super().__init__(since, until, cron, schedule, timezone)
        self.step, self.span = step, span

    def _after(self, after: float) -> float:
        return _in_windows(self.cron, self.tz, self.step, self.span, after)


_ON_ARRIVAL = _Timing()


@lru_cache(maxsize=1024)
def _periodic_timing(schedule: str | None, timezone: str | None, step: int | None, span: int | None,
                     since: float, until: float) -> _Periodic:
    """A valid periodic event's timing, one for the files that share it, as
    _compile_cron's crons are: many files share a handful of schedules."""
    if schedule is None:
        assert step is not None  # the parser's contract: "schedule" or "every" is there
        return _Every(since, until, step, None if timezone is None else _zone(timezone))
    assert timezone is not None  # the parser's contract: a schedule has its zone
    if step is None or span is None:
        return _OnCron(since, until, _compile_cron(schedule), schedule, timezone)
    return _Window(since, until, _compile_cron(schedule), schedule, timezone, step, span)


# ---------------------------------------------------------------------------
# Judging: what becomes of a valid event, decided once for the harness and
# for --check alike
# ---------------------------------------------------------------------------


# A one-shot that fell due at most this long before a harness took over the
# directory (while none held it) still runs, late.
_TAKEOVER_GRACE = 5.0
# An occurrence that fires at least this long after its due time (the clock
# stepped, the machine slept) is said to run late.
_LATE = 1.0
# Counting the occurrences a periodic event missed stops here ("100 or more").
_MISSED_COUNT = 100


@dataclass(frozen=True, slots=True)
class _Account:
    """What the journal says a harness that died did with the occurrences of
    one version of a periodic file: those it fired (ran, merged into a waiting
    one, discarded or withdrawn: not missed), those it queued that never
    ended (missed, whenever due: waiting, or cut short), and until when missed
    ones were counted already (by a start-up that died in turn)."""

    fired: frozenset[float] = frozenset()
    lost: frozenset[float] = frozenset()
    counted: float = -math.inf


@dataclass(frozen=True, slots=True)
class _Startup:
    """What a harness knows when it first looks at the directory, at start-up
    or after a spell in which it could not look: it looks at ``start``; no
    harness watched since ``down_since`` (the previous holder's last sign of
    life, or the last look before the spell; None: unknown, as at a first
    start).  Then an immediate written before ``stale_before`` is stale, and
    ``misfire_grace`` is the operator's grace for one-shots, unless the last
    harness began to run it and died (``cut``): its file runs again."""

    start: float
    down_since: float | None
    stale_before: float
    misfire_grace: float
    last_alive: float | None = None  # the last sign of life itself, without the allowance: periodic events
    accounts: Mapping[tuple[str, int], _Account] = field(default_factory=dict)  # by (file, mtime_ns): the journal
    cut: frozenset[tuple[str, int]] = frozenset()  # (file, mtime_ns): runs cut short, not run again since

    @property
    def periodic_since(self) -> float | None:
        """Where a periodic event's missed occurrences start to count: the
        last sign of life, for the journal says what was fired after it."""
        return self.down_since if self.last_alive is None else self.last_alive

    def stale(self, mtime_ns: int) -> bool:
        """Written while no harness watched, not in its last 2 s (coarse timestamps)."""
        if self.down_since is not None and mtime_ns < self.down_since * 1e9:
            return False  # a harness was alive and should have run it
        return mtime_ns < self.stale_before * 1e9 - _TICK_NS


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A valid event's fate: ``action`` is "schedule" (fire at ``due``),
    "run" (now; ``due`` is when it was due, ``late`` by how much), "reject"
    (the writer's mistake: ``reason``) or "drop" (delete it unrun, recording
    ``outcome``).  ``reason`` also says, for the log, why it runs late or is
    dropped.  A periodic event scheduled at start-up may also have missed
    occurrences (``missed``) and catch up the latest (``catch_up``, late)."""

    action: str
    due: float | None = None
    late: float | None = None
    reason: str = ""
    outcome: str = ""
    missed: int = 0
    catch_up: float | None = None


def _takeover(trace: tuple[float, bool] | None, now: float, misfire_grace: float, waiting_since: float | None = None,
              accounts: Mapping[tuple[str, int], _Account] | None = None,
              cut: frozenset[tuple[str, int]] = frozenset()) -> _Startup:
    """A start-up's first look: every start is a takeover from the harness
    whose ``trace`` the lock file kept (its last sign of life, and whether
    it was a clean stop).  A harness that died may have lived a beat
    longer; a trace from the future (a clock stepped back, a restored
    backup) says nothing.  With no trace, when no harness ran is unknown,
    and an immediate written before the start, or before a standby began
    ``waiting_since``, is stale."""
    down_since = last_alive = None
    if trace is not None:
        seen, clean = trace
        if seen > now + 1.0:
            log.warning("the lock file says a harness was alive %s from now; when none ran is unknown",
                        _span(seen - now))
        else:
            down_since, last_alive = min(now, seen if clean else seen + _DIED_WITHIN), min(now, seen)
    if down_since is None and waiting_since is not None:  # a standby for a harness that leaves no trace
        return _Startup(now, None, waiting_since, max(misfire_grace, _TAKEOVER_GRACE), None, accounts or {}, cut)
    return _Startup(now, down_since, now, misfire_grace, last_alive, accounts or {}, cut)


def _judge(event: Event, timing: _Timing, mtime_ns: int, now: float, startup: _Startup | None) -> _Verdict:
    """The fate of a valid ``event``, run at ``timing``, whose file, modified
    at ``mtime_ns``, is read at ``now``: by a first look (``startup``), or by
    a harness that was running when the file appeared (None; what --check
    assumes)."""
    if event.type == "immediate":
        # Only a first look judges staleness: a file that appears later
        # always runs, whatever mtime mv or cp -p gave it.
        if startup is not None and startup.stale(mtime_ns) and (event.filename, mtime_ns) not in startup.cut:
            return _Verdict("drop", outcome="stale",
                            reason="immediate event written while no harness was running (stale)")
        return _Verdict("run")
    mtime = mtime_ns / 1e9
    if isinstance(timing, _Periodic):
        due = timing.next_after(now - 1e-6, mtime)  # one due at ``now`` itself (to datetime's µs) is not missed
        if math.isinf(due) and math.isinf(timing.next_after(mtime, mtime)):  # as a one-shot's past "at" is
            return _Verdict("reject", reason=_no_run_left(event, now))
        missed, latest = 0, None
        if startup is not None and (since := startup.periodic_since) is not None:
            missed, latest = _missed(timing, since, now, mtime, startup.accounts.get((event.filename, mtime_ns)))
        catch_up = latest if event.catch_up else None
        late = None if catch_up is None else now - catch_up
        if math.isinf(due) and catch_up is not None:
            return _Verdict("run", catch_up, late, "its last occurrence fell due while no harness was running "
                                                   "(catchUp)", missed=missed)
        if math.isinf(due):
            return _Verdict("drop", outcome="ended", reason="its schedule has no occurrence left", missed=missed)
        return _Verdict("schedule", due, late, missed=missed, catch_up=catch_up)
    assert isinstance(timing, _Once)
    due = timing.due
    if due > now:
        return _Verdict("schedule", due)
    if mtime_ns >= due * 1e9:  # written after its time: the writer's mistake, whoever was running
        return _Verdict("reject", due, reason=_past_reason(event.at or "", timing.at, now))
    if startup is None:  # judged by when it was written, not by when a poll saw it
        return _Verdict("run", due, now - due, f"written before its time {event.at} but seen after it")
    if (event.filename, mtime_ns) in startup.cut:  # the journal says so: it runs again, whatever the window
        return _Verdict("run", due, now - due, f"one-shot was due at {event.at}; its run was cut short")
    if startup.down_since is not None:  # every start is a takeover
        if due < startup.down_since:
            return _Verdict("run", due, now - due, f"one-shot was due at {event.at}, while a harness was running")
        if startup.start - due <= _TAKEOVER_GRACE:
            return _Verdict("run", due, now - due,
                            f"one-shot was due at {event.at}, just before this harness took over")
    if startup.misfire_grace > 0 and now - due <= startup.misfire_grace:
        return _Verdict("run", due, now - due,
                        f"one-shot was due at {event.at}, {now - due:.0f} s before start-up (misfire grace)")
    return _Verdict("drop", due, outcome="missed",
                    reason=f"one-shot was due at {event.at} while no harness was running")


def _missed(timing: _Periodic, since: float, until: float, mtime: float,
            account: _Account | None = None) -> tuple[int, float | None]:
    """How many occurrences of a periodic ``timing``, whose file was written
    at ``mtime``, fell due in [since, until) and did not run (counted up to
    _MISSED_COUNT), and the latest of them.  ``account``: what the journal
    says a harness that died fired of them, and queued but never started."""
    if account is None:
        account = _Account()
    if mtime <= until:  # not before the file was written (a future mtime says nothing)
        since = max(since, mtime)
    since = max(since, account.counted)  # nor counted twice
    lost = sorted(due for due in account.lost if account.counted <= due < since)  # queued, never started: missed
    caught = [due for due in account.lost if due < account.counted]  # a catch-up queued after the count: run, not told
    count, latest, after = len(lost), max(lost + caught, default=None), since - 1e-3
    while count < _MISSED_COUNT:
        due = timing.next_after(after, mtime)
        if due >= until:
            return count, latest
        after = due
        if due not in account.fired:
            count, latest = count + 1, due
    back = 1.0  # many: find the latest one before ``until`` from just before it
    while (due := timing.next_after(until - back, mtime)) >= until and back < until - after:
        back *= 2
    while due < until:
        latest, due = due, timing.next_after(due, mtime)
    return count, latest


def _no_run_left(event: Event, now: float) -> str:
    """Why a periodic event written after its last run is rejected."""
    if event.until is None:
        return f"its schedule {_clip(_when(event) or '')!r} has no run after the file was written"
    until = datetime.fromisoformat(event.until)
    if until.timestamp() > now:
        return f'"until" {_clip(event.until)} comes before its first run'
    return (f'"until" {_clip(event.until)} is {_span(now - until.timestamp())} in the past '
            f"(it is now {datetime.fromtimestamp(now, until.tzinfo).isoformat(timespec='seconds')})")


def _missed_notice(event: Event, timing: _Timing, due: float, startup: _Startup) -> Event:
    """What a one-shot deleted unrun as missed tells the agent, on its channel."""
    tz = timing.clock(None)
    spell = ""
    if startup.down_since is not None:
        since, until = datetime.fromtimestamp(startup.down_since, tz), datetime.fromtimestamp(startup.start, tz)
        fmt = "%H:%M:%S" if since.date() == until.date() else "%Y-%m-%d %H:%M:%S"
        spell = f" (from {since.strftime(fmt)} to {until.strftime(fmt)})"
    text = (f"It was due at {event.at} while no harness was running{spell}; it did not run, "
            "and the file was deleted.")
    return Event(event.filename, "missed", event.channel_id, text, at=event.at)


def _aware(timing: _Timing, due: float | None, user: tzinfo | None = None) -> datetime | None:
    """An occurrence's due time as the agent reads it: at the one-shot's own
    offset, in the periodic event's timezone; an interval, which has none,
    in the ``user``'s (default: the host's)."""
    if due is None or math.isinf(due):
        return None
    return datetime.fromtimestamp(due, UTC).astimezone(timing.clock(user))


# ---------------------------------------------------------------------------
# Directory scanning: a scan is a value, and so is the difference of two
# ---------------------------------------------------------------------------


def _is_event_name(name: str) -> bool:
    """``x.json`` is an event; ``.x.json``, ``x.json.tmp`` and ``x.json~`` are
    not, so writers can write a temporary name and rename it into place."""
    return name.endswith(".json") and not name.startswith(".")


# A regular file's stat signature: (inode, device, size, mtime_ns, ctime_ns).
_Sig: TypeAlias = tuple[int, int, int, int, int]
# A directory's identity: (device, inode).
_DirId: TypeAlias = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Entry:
    """What a scan saw of one name.  ``sig`` is the stat signature of a regular
    file (links followed): inode, device, size, mtime, ctime.  Anything else
    has no signature, and ``kind`` says what it is."""

    sig: _Sig | None
    kind: str = "regular file"

    @property
    def mtime_ns(self) -> int:
        return self.sig[3] if self.sig else 0


def _signature(st: os.stat_result) -> _Sig:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))


def _describe(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _stat_entry(path: str) -> _Entry | None:
    """Stat one name without opening it; None when it has vanished."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _Entry(None, "dangling symlink") if os.path.lexists(path) else None
    except OSError as exc:
        what = "symlink loop" if os.path.islink(path) else f"entry that cannot be examined ({exc.strerror})"
        return _Entry(None, what)
    if stat.S_ISREG(st.st_mode):
        return _Entry(_signature(st))
    return _Entry(None, _describe(st.st_mode))


def _is_racy(seen_ns: int, changed_ns: int) -> bool:
    """Was it looked at too soon after it was changed to trust its stat?  A
    change more than a tick ahead (the clock stepped back since) is not: a
    write now stamps another time."""
    tick = _TICK_NS if changed_ns % 1_000_000_000 == 0 else _FINE_TICK_NS
    return abs(seen_ns - changed_ns) < tick


def _list(directory: str, own: frozenset[str] = frozenset()) -> dict[str, int]:
    """The event names in the directory, but ``own`` (``_own_names``), and
    their inode numbers, which scandir reads from the directory entries
    themselves, without a stat."""
    with os.scandir(directory) as entries:
        return {entry.name: entry.inode() for entry in entries if _is_event_name(entry.name) and entry.name not in own}


def _own_names(directory: str, history: str | None) -> frozenset[str]:
    """The history's names in ``directory`` (the same directory, however
    spelled), as given and once links are resolved: the harness's own file,
    which it never reads as an event, even when it is named like one."""
    names = set()
    for path in () if history is None else (history, os.path.realpath(history)):
        head, name = os.path.split(path)
        try:
            if os.path.samefile(head or ".", directory):
                names.add(name)
        except OSError:  # its directory does not exist: it is not this one
            continue
    return frozenset(names)


def _relisted(old: dict[str, int], new: dict[str, int], stat_all: bool) -> list[str]:
    """The names a new listing says to stat again: new ones, ones whose inode
    changed (replaced by a rename over them), and gone ones.  Names with the
    same inode are left to the sweep, unless ``stat_all``."""
    changed = [name for name, ino in new.items() if stat_all or old.get(name) != ino]
    return changed + [name for name in old if name not in new]


def _sweep_batch(known: int, stat_cost: float, interval: float) -> int:
    """How many files to stat in a batch every ``interval`` for the pace
    described at _SWEEP_SHARE."""
    if known == 0:
        return 0
    cost = known * stat_cost  # of a whole pass
    period = max(interval, min(_SWEEP_PERIOD, cost / _SWEEP_SHARE), cost / _SWEEP_MAX_SHARE)
    return min(known, math.ceil(known * interval / period))


@dataclass(frozen=True, slots=True)
class _Diff:
    """What a scan found changed: names to read again, and names gone."""

    changed: list[str]
    deleted: list[str]


def _diff(old: dict[str, _Entry], seen: dict[str, _Entry | None]) -> _Diff:
    """``seen`` maps the names looked at to what they are now (None: gone)."""
    return _Diff(
        changed=[name for name, entry in seen.items() if entry is not None and old.get(name) != entry],
        deleted=[name for name, entry in seen.items() if entry is None and name in old],
    )


class _NotRegular(Exception):
    """The name turned into something that is not a regular file."""


def _ignored(name: str, kind: str) -> str:
    """The one line said of a ``*.json`` entry that is no regular file."""
    return f"{name}: ignored: it is a {kind}, not a regular file"


def _read_file(path: str) -> tuple[bytes, _Sig]:
    """Read at most 1 MiB + 1 byte; returns it with the signature of the file
    it came from, taken after reading.  What the harness remembers of a file
    must describe the bytes it read, not what a scan saw before (the writer
    may have finished since); a write landing during the read gives an mtime
    after the read began, which the racy rule then checks again.  O_NONBLOCK:
    a FIFO swapped in after the scan must never block the scheduler; fstat
    then refuses it unread."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _NotRegular(_describe(mode))
        chunks, remaining = [], MAX_FILE_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks), _signature(os.fstat(fd))
    finally:
        os.close(fd)


def _digest(data: bytes) -> int:
    """What a content was, to notice a change under an unchanged stat, the
    same in every process (a run's is journaled): CRC-32, from binascii
    (hashlib costs 4 MB; Python's own hash is seeded anew in each process)."""
    return binascii.crc32(data)


_TAKEN = ".mom_events-taken"  # the end of the private name a file is moved to, to delete or rename it


def _take(directory: str, name: str, sig: _Sig, digest: int | None) -> str | None:
    """Act on the file judged (``sig`` and ``digest``), not on whatever has
    its name now: check that the name still holds it (its whole signature;
    its content too while its last write is too recent to trust), move it to a
    private name (a dotfile, never an event), and check that what moved is
    the same file (inode, size, mtime: the rename changes the ctime), for an
    ``mv`` may land in between.  Returns the private path to delete or
    rename; None when another file has the name (put back if it was moved)
    or none has."""
    path = os.path.join(directory, name)
    taken = os.path.join(directory, f".{name}{_TAKEN}")
    try:
        st = os.stat(path)
        if _signature(st) != sig or (_is_racy(time.time_ns(), st.st_ctime_ns)
                                     and _digest(_read_file(path)[0]) != digest):
            return None
        os.rename(path, taken)
    except (FileNotFoundError, _NotRegular):
        return None
    try:
        same = _signature(os.stat(taken))[:4] == sig[:4]
    except OSError:
        same = False
    if same:
        return taken
    log.debug("%s: written again since it was judged; putting the new file back", name)
    _put_back(taken, path)
    return None


def _put_back(taken: str, path: str) -> None:
    """Give a taken file its name again, unless a newer one has it by now
    (then the taken one was replaced, as by a later ``mv``).  Never raises:
    at worst the private name is left behind."""
    try:
        try:
            os.link(taken, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links
            os.rename(taken, path)
            return
        os.unlink(taken)
    except OSError as exc:
        log.debug("%s: cannot put it back in place (%s)", path, exc.strerror or exc)


# ---------------------------------------------------------------------------
# One harness per directory: two would fire every event twice
# ---------------------------------------------------------------------------

_LOCK_NAME = ".mom_events.lock"  # a dotfile, so never an event

# The lock file's second line, which says that its mtime is a trace of life:
# the harness holding it refreshes it every _HEARTBEAT and at a clean stop
# (which adds _STOPPED), so the next one knows when no harness ran.  A lock
# file without it (none yet, or one an older version wrote) leaves that
# unknown.  A harness that died may have lived up to a beat after its last
# one (or longer, if a tick was slow): _DIED_WITHIN is allowed for that.
_TRACE = "its mtime: when the harness holding it was last alive\n"
_STOPPED = "it stopped cleanly then\n"
_HEARTBEAT = 1.0  # seconds
_DIED_WITHIN = 2 * _HEARTBEAT
_HUNG = 30 * _HEARTBEAT  # a holder silent this long may hang: a standby says so


def _last_beat(fd: int) -> float | None:
    """When the harness holding the lock file open as ``fd`` was last alive;
    None when the file says nothing of it (an older version)."""
    try:
        rest, mtime = os.pread(fd, 256, 0).partition(b"\n")[2], os.fstat(fd).st_mtime
    except OSError:
        return None
    trace = _DirectoryLock._trace(rest, mtime)
    return None if trace is None else trace[0]


def _directory_id(st: os.stat_result) -> _DirId:
    return (st.st_dev, st.st_ino)


class _DirectoryLock:
    """An advisory ``flock`` on ``DIR/.mom_events.lock`` holding the owner's
    PID.  The kernel drops it when the process dies, even by SIGKILL, so a
    crash never leaves a stale lock behind; the file itself stays, and its
    mtime says when its last holder was last alive (``last_alive``, read as
    the lock is taken)."""

    def __init__(self, directory: str):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            dir_st = os.fstat(dir_fd)
            self.directory_id = _directory_id(dir_st)
            self.directory_mode = dir_st.st_mode
            fd = os.open(_LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").partition("\n")[0].strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise EventError(None, f"{directory} is already watched by {who} (lock file {_LOCK_NAME})") from None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder's trace stays as it is until this harness has
        # looked at the directory (its first beat): killed during its own
        # start-up, it must not hide the downtime from the next one.
        st = os.fstat(fd)
        rest = os.pread(fd, 256, 0).partition(b"\n")[2]
        self.trace = self._trace(rest, st.st_mtime)
        if self.trace is None:
            rest = b""
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode() + rest, 0)
        if self.trace is not None:
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        self._fd: int | None = fd
        self._tracing = False

    @staticmethod
    def _trace(rest: bytes, mtime: float) -> tuple[float, bool] | None:
        """When the previous holder was last alive, and whether it stopped
        cleanly then, from the lines after its PID and the file's mtime;
        None when unknown."""
        if rest not in (_TRACE.encode(), (_TRACE + _STOPPED).encode()):
            return None
        return mtime, rest.endswith(_STOPPED.encode())

    def beat(self, stopping: bool = False, now: float | None = None) -> None:
        """A sign of life: the file's mtime is ``now`` on the harness's clock
        (default: the system's), and, ``stopping``, that it stopped cleanly."""
        if self._fd is None:
            return
        try:
            if stopping or not self._tracing:
                content = f"{os.getpid()}\n{_TRACE}{_STOPPED if stopping else ''}".encode()
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, content, 0)
                self._tracing = True
            os.utime(self._fd, None if now is None else (now, now))
        except OSError:  # a read-only remount: the next start knows less, no more
            pass

    def release(self, clean: bool = True, now: float | None = None) -> None:
        if self._fd is not None:
            if clean and self._tracing:
                self.beat(True, now)  # the last sign of life is now
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


# ---------------------------------------------------------------------------
# What a harness leaves for the next: its runs' processes, and the journal
# ---------------------------------------------------------------------------


def _run_members(sid: int) -> list[int]:
    """The live processes of a run: its session ``sid`` (the shell started
    one), whatever process group they moved to (GNU timeout, shells with job
    control do); only ``setsid`` leaves it.  Zombies do not count: what a
    shell leaves behind is reparented to PID 1, which in a container may reap
    late or never, and a zombie runs nothing.  (A child subreaper could reap
    them itself, but would then have to reap every daemon the commands start,
    setsid ones too.)  Without /proc, the session's first group is all that
    can be seen."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        try:
            os.killpg(sid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [sid]
    members = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                state, _, _, session = file.read().rsplit(b")", 1)[1].split()[:4]
        except (OSError, ValueError):  # gone meanwhile
            continue
        if int(session) == sid and state not in (b"Z", b"X"):
            members.append(int(pid))
    return members


def _signal_session(sid: int, signum: int) -> None:
    """Signal every process of a run: its group, and the members of its
    session that moved to groups of their own."""
    for pid in _run_members(sid):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(sid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _failure(returncode: int) -> str | None:
    """What a command's exit says went wrong (``subprocess``'s returncode:
    -N for signal N), in one line; None for success."""
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}" if returncode else None


def _process_start(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (``/proc/PID/stat``'s
    22nd field): with its PID, what tells it from a later process that got
    the same number.  None when it is gone, or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return int(file.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _machine() -> str:
    """What process IDs are relative to: this boot of this machine, and the
    PID namespace (a container has its own); "" when unknown.  A journal
    written elsewhere names processes that are not ours to stop."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return f"{file.read().strip()}/{os.readlink('/proc/self/ns/pid')}"
    except (OSError, UnicodeDecodeError):
        return ""


def _stop_session(sid: int, start: int) -> int:
    """Stop what is left of a dead harness's command: the session ``sid``,
    whose leader started at ``start``, gets SIGTERM, then SIGKILL a second
    later.  A leader alive with another start time means the number was
    reused, so the session is long gone: the kernel keeps a session's number
    while any process is in it.  Returns how many processes it stopped."""
    leader = _process_start(sid)
    if leader is not None and leader != start:
        return 0
    members = _run_members(sid)
    for signum, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, _KILL_WAIT)):
        if not _run_members(sid):
            return len(members)
        _signal_session(sid, signum)
        deadline = time.monotonic() + wait
        while _run_members(sid) and time.monotonic() < deadline:
            time.sleep(0.01)
    if _run_members(sid):
        log.error("processes of session %d outlive SIGKILL; going on without them", sid)
    return len(members)


_JOURNAL_NAME = ".mom_events.journal"  # a dotfile, so never an event
_JOURNAL_COMPACT = 64 << 10  # bytes: a longer journal is rewritten with only what is still open

# A record's kind, and what it says (every record is one JSON object on a line):
# "harness"  who writes the records after it: its PID, and the machine its
#            commands' process IDs belong to (see _machine);
# "fire"     a periodic occurrence of "file" (modified at "mtime"), due at "due", was
#            queued ("queued": true), or merged into a waiting one, discarded or withdrawn;
# "run"      run "id" of an --exec command started: the occurrence's "file", "type",
#            "channelId", "due", its file's signature "sig", whether the file goes once it
#            has run ("final"), and the command's session "sid", whose leader started at
#            "start" (see _process_start); written before the command may start;
# "end"      run "id" ended, and whether it "ran" to its end (not cut short at shutdown):
#            written "by" the harness once the history has it, with what a "run" record
#            says, or by the shell that ran the command (see _WRAPPER), with its exit
#            "status", should the harness be dead by then;
# "notice"   notice "id" is to be sent: its "event", about "file" (signature "sig"),
#            written before that file is deleted or renamed; its run's "end" says it was sent;
# "counted"  "file"'s missed occurrences before "until" are in the history already.


@dataclass
class _Left:
    """What a journal says its harness left undone: commands' runs cut short
    (``cut``: their ``run`` records, with ``sid`` and ``start``), runs that
    ended (``ended``, with what their ``end`` records said: ``ran``,
    ``status`` and whether the history has them, ``recorded``), notices not
    sent, periodic files' accounts, the versions (file, mtime) to run again
    whatever the window (``reruns``: those of runs cut short, and those a
    start-up carried over, run since or not: the next start keeps those
    whose file is unchanged), and the records still open (``open``: a
    command's run until the harness has recorded its end, for its session
    may hold processes until then)."""

    pid: int | None = None
    machine: str = ""
    first: int | None = None  # the first of that journal's ids: which journal it is
    cut: list[dict[str, Any]] = field(default_factory=list)
    ended: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    accounts: dict[tuple[str, int], _Account] = field(default_factory=dict)  # by (file, mtime_ns)
    reruns: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # their records, by version
    open: list[dict[str, Any]] = field(default_factory=list)


def _fold(data: bytes) -> _Left:
    """Read a journal's records in order.  A line that does not parse (cut by
    a crash mid-write) or is not a record is skipped."""
    left = _Left()
    runs: dict[int, list[dict[str, Any]]] = {}  # a run's records ("run" and "end"), by its id
    notices: dict[int, dict[str, Any]] = {}
    fires: dict[tuple[str, int, float], tuple[bool, int]] = {}  # (file, mtime, due): queued, and at which line
    until: dict[tuple[str, int], float] = {}  # (file, mtime): its missed occurrences are counted until when
    counted_at: dict[tuple[str, int], int] = {}  # ... and at which line that was said last
    for number, line in enumerate(data.splitlines()):
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "harness":
                left.pid, left.machine, left.first = record["pid"], record["machine"], record.get("first")
            elif kind == "fire":
                fires[record["file"], record["mtime"], record["due"]] = (record["queued"], number)
            elif kind in ("run", "end"):
                runs.setdefault(record["id"], []).append(record)
                if kind == "end":
                    notices.pop(record["id"], None)
            elif kind == "notice":
                notices[record["id"]] = record
            elif kind == "rerun":
                left.reruns[record["file"], record["sig"][3]] = record
            elif kind == "counted":  # what was queued and lost so far is in the history now
                version = (record["file"], record["mtime"])
                until[version], counted_at[version] = max(until.get(version, -math.inf), record["until"]), number
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            continue
    for mine in runs.values():
        begun = [r for r in mine if r["kind"] == "run"]  # the run, then its command's session, if any
        run = {key: value for r in begun for key, value in r.items()} if begun else None
        harness = next((r for r in mine if r["kind"] == "end" and r.get("by") == "harness"), None)
        shell = next((r for r in mine if r["kind"] == "end" and r.get("by") != "harness"), None)
        if harness is not None:
            left.ended.append({**(run or {}), **harness, "recorded": True})
            continue
        if run is None:  # a notice taken back
            continue
        left.open.extend(mine)  # its command's session may hold processes yet: the next harness stops them
        if shell is not None:
            left.ended.append({**run, "ran": shell["ran"], "status": shell.get("status")})
        else:
            left.cut.append(run)
            if run.get("sig") and run["type"] != "periodic":  # a periodic's is counted missed instead
                left.reruns[run["file"], run["sig"][3]] = {"kind": "rerun", "file": run["file"], "sig": run["sig"],
                                                           "digest": run.get("digest")}
    left.open += left.reruns.values()  # until the next start finds the file gone or changed (see _recover)
    left.notices = list(notices.values())
    done = {(run["file"], run["sig"][3], run["due"]) for run in left.ended if run.get("type") == "periodic"}
    lost = {key for key, (queued, number) in fires.items()  # queued, never ended, not counted since: missed
            if queued and number > counted_at.get(key[:2], -1)} - done
    for run in left.cut:  # a catch-up cut short was counted already: it is not missed again, nor run again
        if run["type"] == "periodic" and run.get("sig") and run["due"] < until.get((run["file"], run["sig"][3]),
                                                                                   -math.inf):
            lost.discard((run["file"], run["sig"][3], run["due"]))
    dues: dict[tuple[str, int], tuple[set[float], set[float]]] = {version: (set(), set()) for version in until}
    for key in [*done, *fires]:  # a version's (fired, lost) occurrences; one only counted has none
        fired, missed = dues.setdefault(key[:2], (set(), set()))
        (missed if key in lost else fired).add(key[2])
    for version, (fired, missed) in dues.items():
        left.accounts[version] = _Account(frozenset(fired), frozenset(missed), until.get(version, -math.inf))
    left.open += [{"kind": "counted", "file": file, "mtime": mtime, "until": until[file, mtime]}  # first:
                  for file, mtime in {key[:2] for key in lost} & until.keys()]  # a catch-up is no new miss
    left.open += [{"kind": "fire", "file": file, "mtime": mtime, "due": due, "queued": True}
                  for file, mtime, due in lost]
    left.open += left.notices
    return left


def _account_records(version: tuple[str, int], account: _Account) -> list[dict[str, Any]]:
    """The account of a file's ``version`` (name, mtime) as the records that make it, to carry it over:
    what was counted first, for a fire queued before a "counted" record reads as counted too."""
    file, mtime = version
    counted = [] if math.isinf(account.counted) else [
        {"kind": "counted", "file": file, "mtime": mtime, "until": account.counted}]
    return counted + [{"kind": "fire", "file": file, "mtime": mtime, "due": due, "queued": due in account.lost}
                      for due in sorted(account.fired | account.lost)]


def _journal_line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")


class _Journal:
    """An append-only file beside the lock: what this harness started, ended
    and has still to tell, each written before it acts, so that the next
    harness (a restart, a standby) knows exactly what a dead one left, with
    no guess from the lock file's heartbeat: the runs it cut short (and the
    commands still running for them), the runs that ended while their files
    were not deleted yet, the notices it did not send, and which periodic
    occurrences it fired.  Each record is one ``write`` on an ``O_APPEND``
    descriptor, so a process's death loses nothing written (power loss may).

    A harness reads what the last one left (``left``), acts on it, then
    starts the file anew with what it carries over (``begin``); while it
    runs, the file is rewritten with only what is still open whenever it
    outgrows _JOURNAL_COMPACT (``compact``).  A journal that cannot be
    written is logged once and never stops events."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, _JOURNAL_NAME)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        # Unique beyond this harness: a command's shell journals its run's end
        # by path, which is another harness's journal once the directory was
        # made anew and taken by it (see _Hold.again).  Random, and which
        # journal is whose, too (_recover): 52 bits, so that its ids stay
        # below 2**53, which a JSON number holds exactly.
        self.first = int.from_bytes(os.urandom(7), "big") >> 4
        self._ids = itertools.count(self.first)
        self._broken = False

    def next_id(self) -> int:
        return next(self._ids)

    def _header(self) -> dict[str, Any]:
        """The first record: the harness that writes the file (see _Left)."""
        return {"kind": "harness", "pid": os.getpid(), "machine": _machine(), "first": self.first}

    def left(self) -> _Left:
        """What the journal holds now: what the last harness left."""
        try:
            with open(os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW), "rb") as file:
                return _fold(file.read())
        except FileNotFoundError:
            return _Left()
        except OSError as exc:  # a directory, a link, unreadable: the next write says it again
            log.error("cannot read the journal %s (%s); what the last harness left is unknown",
                      self.path, exc.strerror or exc)
            return _Left()

    def begin(self, carried: list[dict[str, Any]]) -> None:
        """Start the file anew: this harness, then the records ``carried`` over."""
        with self._lock:
            self._replace([self._header(), *carried])

    def write(self, record: dict[str, Any]) -> None:
        """Append one record, whole or not at all."""
        line = _journal_line(record)
        with self._lock:
            if self._fd is None:
                return
            try:
                written = os.write(self._fd, line)
                if written != len(line):
                    os.ftruncate(self._fd, self._size)
                    raise OSError(f"only {written} of {len(line)} bytes written")
            except OSError as exc:
                self._failed(exc)
                return
            self._size += written
            self._recovered()

    def fired(self, job: _Job, queued: bool) -> None:
        """Journal a periodic occurrence as queued, or as merged, discarded or
        withdrawn (not missed, whatever becomes of the harness)."""
        if job.occurrence.type == "periodic" and job.due is not None and job.sig is not None:
            self.write({"kind": "fire", "file": job.occurrence.filename, "mtime": job.sig[3], "due": job.due,
                        "queued": queued})

    def compact(self) -> None:
        """Rewrite the file with only what is still open, once it has grown
        (the scheduler thread, just after a heartbeat: what fell due before
        it is no concern of the next harness's)."""
        if self._size > _JOURNAL_COMPACT:
            with self._lock:
                own = self._own(gone_ok=False)
                if own is not None:
                    self._replace([self._header(), *own])

    def own(self) -> list[dict[str, Any]]:
        """What this harness's own journal has still open, to carry over to
        the journal of a directory made anew."""
        with self._lock:
            return self._own(gone_ok=True) or []

    def _own(self, gone_ok: bool) -> list[dict[str, Any]] | None:
        """Read through the descriptor: the file at the path may be another
        directory's, maybe another harness's, once its own is gone (None then,
        unless ``gone_ok``)."""
        if self._fd is None:
            return None
        try:
            st = os.fstat(self._fd)  # its size: a command's shell appends to it too
            if st.st_nlink == 0 and not gone_ok:
                return None
            return _fold(os.pread(self._fd, st.st_size, 0)).open
        except OSError as exc:
            self._failed(exc)
            return None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _replace(self, records: list[dict[str, Any]]) -> None:
        """Write ``records`` to a new file and rename it over the journal: a
        crash leaves the old one or the new one, whole."""
        data = b"".join(map(_journal_line, records))
        new = self.path + ".new"
        try:
            fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(new, self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)  # read: _own
        except OSError as exc:
            self._failed(exc)
            return
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._size = fd, len(data)
        self._recovered()

    def _failed(self, exc: OSError) -> None:
        if not self._broken:
            log.error("cannot write the journal %s (%s); a harness that takes over after a crash will know "
                      "less of what ran", self.path, exc.strerror or exc)
            self._broken = True

    def _recovered(self) -> None:
        if self._broken:
            log.warning("the journal %s is written again", self.path)
            self._broken = False


_Record: TypeAlias = Callable[..., None]  # _Outbox.record: a line of the history, if kept


def _recover(directory: str, journal: _Journal, record: _Record) -> tuple[
        Mapping[tuple[str, int], _Account], frozenset[tuple[str, int]], list[dict[str, Any]], bool]:
    """Take over what the journal says the last harness left (at start-up,
    before anything runs): stop what is left of the runs it cut short and
    record them, delete the files of runs that ended, put back a file it
    was deleting or renaming, record as cancelled the periodic occurrences
    it queued whose file is gone or changed since; then start the journal
    anew, with what this harness has still open (in a directory made anew).
    Returns, for the start-up's judge, the periodic files' accounts and the
    versions (file, mtime_ns) to run again (carried over until they have),
    then the notices it did not send, to send once the directory has been
    judged, and whether the journal was this harness's own (the directory
    copied back in place)."""
    own, left = journal.own(), journal.left()
    here = bool(left.machine) and left.machine == _machine()  # its commands' processes are this machine's
    mine = left.first is not None and left.first == journal.first
    if mine:
        left = _Left()  # this harness's own, copied with its directory: what it has open is ``own``
    stopped = {run["id"]: _stop_session(run["sid"], run["start"]) if here else None
               for run in left.open if run["kind"] == "run" and run.get("sid") is not None}
    if stopped:
        left = journal.left()  # what their shells journaled, of the commands that ended meanwhile
    _put_back_taken(directory)
    for run in left.cut:
        detail = _cut_short(directory, run, left.pid, stopped.get(run["id"]))
        log.warning("%s: %s", run["file"], detail)
        record("interrupted", run["file"], type=run["type"], channelId=run["channelId"], dueAt=run["due"],
               detail=detail)
    for run in left.ended:
        _settle_ended(directory, run, record)
    notices = []
    for notice in left.notices:  # one whose file is still there (put back, maybe) is told again by its judge
        entry = _stat_entry(os.path.join(directory, notice["file"]))
        if notice["sig"] is None or entry is None or entry.sig is None or entry.sig[:4] != tuple(notice["sig"][:4]):
            notices.append({**notice, "id": journal.next_id()})
    carried = []
    for (file, mtime_ns), account in left.accounts.items():
        entry = _stat_entry(os.path.join(directory, file))
        if entry is not None and entry.sig is not None and entry.sig[3] == mtime_ns:
            carried += _account_records((file, mtime_ns), account)
            continue
        for due in sorted(account.lost):  # the version they were queued for is gone: as while running
            record("cancelled", file, type="periodic", dueAt=due,
                   detail="its file was removed or changed before it ran")
    reruns = [rerun for rerun in left.reruns.values() if _holds(directory, rerun) is not None]
    journal.begin(carried + reruns + notices + own)
    return left.accounts, frozenset((rerun["file"], rerun["sig"][3]) for rerun in reruns), notices, mine


def _put_back_taken(directory: str) -> None:
    """A file the last harness was deleting or renaming when it died is under
    its private name still: give it its own back (unless a newer file has
    it), to be judged as any other."""
    try:
        with os.scandir(directory) as entries:
            taken = [entry.name for entry in entries if entry.name.endswith(_TAKEN) and entry.name.startswith(".")]
    except OSError:  # the scan says what is wrong with the directory
        return
    for name in taken:
        _put_back(os.path.join(directory, name), os.path.join(directory, name[1:].removesuffix(_TAKEN)))


def _cut_short(directory: str, run: dict[str, Any], pid: int | None, stopped: int | None) -> str:
    """What is said of a run the last harness started and never ended;
    ``stopped``: how many processes its command left (None: not this
    machine's to stop)."""
    detail = f"cut short: the harness (process {pid}) died while it ran"
    if run.get("sid") is not None and stopped is None:
        detail += "; its command ran on another machine or in another container, which must stop it"
    elif stopped:
        detail += f"; stopped the {stopped} process{'es' if stopped > 1 else ''} its command left"
    if run["type"] in _NOTICES:
        return detail + "; it is sent again"
    if run["type"] == "periodic":
        return detail + "; it counts as missed"
    if not os.path.lexists(os.path.join(directory, run["file"])):
        return detail + "; its file is gone (with the directory it was in, maybe)"
    if run.get("sig") and _holds(directory, run) is None:
        return detail + "; its file was written again since, and is judged as any other"
    return detail + "; its file stays, so it runs again"


def _holds(directory: str, run: dict[str, Any]) -> tuple[_Sig, int] | None:
    """The signature and digest of the file a journaled ``run`` read, if its
    name holds it still, unless written again since (a put-back changed its
    ctime: the rest must be the same); None if gone, or no longer a file."""
    try:
        data, sig = _read_file(os.path.join(directory, run["file"]))
    except (OSError, _NotRegular):
        return None  # the scan says what became of it
    digest = _digest(data)
    return (sig, digest) if sig[:4] == tuple(run["sig"][:4]) and run.get("digest", digest) == digest else None


def _settle_ended(directory: str, run: dict[str, Any], record: _Record) -> None:
    """A run that ended before the last harness died: record it if that
    harness did not (its command's shell journaled the end), and delete its
    file, if it goes and is still the file that ran."""
    fields = {"type": run["type"], "channelId": run["channelId"], "dueAt": run["due"]}
    if not run.get("recorded"):
        status = run.get("status") or 0  # the shell's: 128 + N for signal N (see _WRAPPER)
        failure = _failure(128 - status if status > 128 else status)
        record("done" if failure is None else "failed", run["file"], **fields, detail=failure)
    if not (run["ran"] and run["final"] and run["sig"]) or (held := _holds(directory, run)) is None:
        return
    name, (sig, digest) = run["file"], held
    try:
        taken = _take(directory, name, sig, digest)
        if taken is None:
            return
        try:
            os.unlink(taken)
        except OSError:
            _put_back(taken, os.path.join(directory, name))
            raise
    except OSError as exc:
        log.error("%s: it ran before the last harness died, but cannot be deleted (%s): it runs again",
                  name, exc.strerror or exc)
        return
    log.info("%s: it ran before the last harness died, which had yet to delete it: deleted", name)
    if run["type"] == "periodic":
        record("ended", name, **fields, detail="its last occurrence has run")


class _Systemd:
    """systemd's notify protocol (sd_notify(3)), spoken when the service
    manager sets NOTIFY_SOCKET: a datagram per message.  READY=1 once the
    harness serves (or stands by), WATCHDOG=1 from the scheduler's own loop
    every half WATCHDOG_USEC, so that a loop that hangs stops the pings and
    systemd kills and restarts the harness (a standby then takes over), and
    STOPPING=1 at shutdown; STATUS= says what it does, for systemctl status."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        path = environ.get("NOTIFY_SOCKET", "")
        self._address = "\0" + path[1:] if path.startswith("@") else path  # "@": the abstract namespace
        usec, pid = environ.get("WATCHDOG_USEC", ""), environ.get("WATCHDOG_PID", "")
        self._every = int(usec) / 2e6 if usec.isdigit() and int(usec) and pid in ("", str(os.getpid())) else None
        self._next_ping = 0.0

    def send(self, *lines: str, wait: float = 1.0) -> None:
        """One datagram, on a socket of its own: nothing is left open when the
        watcher goes.  A socket whose reader has stopped reading holds a few
        datagrams (net.unix.max_dgram_qlen), then blocks the sender: it is
        waited for ``wait`` seconds at most, and for a ping, which the
        scheduler's loop sends, not at all (blocked there for good, the loop
        would run no event and hear no stop)."""
        if not self._address:
            return
        import socket
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(wait)
                sock.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:  # no manager listens, or it reads no more: nothing to tell
            log.debug("cannot notify systemd at %s (%s)", self._address, exc.strerror or exc)

    def ping(self, mono: float) -> None:
        """WATCHDOG=1, if it is time (``mono``: the monotonic clock)."""
        if self._every is not None and mono >= self._next_ping:
            self._next_ping = mono + self._every
            self.send("WATCHDOG=1", wait=0)


# The journal and the run being performed on this thread (what its "end" record will
# say), for the --exec supervisor to journal its command under: set by _Runs.perform.
_running = threading.local()


@dataclass(frozen=True, slots=True)
class _Changes:
    """What one scan found: regular files to read again (new, or changed by
    their stat or, under the racy rule, their content), as ``(name, sig)`` in
    order of mtime, then name; names gone; names that hold something other
    than a regular file now."""

    changed: list[tuple[str, _Sig]]
    deleted: list[str]
    unusable: list[str]


class _Scanner:
    """The events directory as the harness sees it: the last listing, the
    snapshot of stats and the sweep's place.  It stats and lists, and reads
    no file; the directory's lock is the watcher's.

    ``scan()`` runs on one thread (the scheduler's), without the watcher's
    lock: a listing of thousands of names takes a while.  ``forget()`` may be
    called from any thread; the next scan takes it in."""

    def __init__(self, directory: str, poll_interval: float, history: str | None = None):
        self.directory = directory
        self._prefix = os.path.join(directory, "")
        self._history = history
        self._own: frozenset[str] = frozenset()  # the history's names, if it lies in the directory
        self._snapshot: dict[str, _Entry] = {}
        self._listing: dict[str, int] = {}      # name -> inode, from the last listing
        self._dir_key: tuple[int, int, int] | None = None   # the directory's (dev, inode, mtime) then
        self._dir_racy = False                  # listed too soon after its mtime to trust
        self._sweep_names: list[str] = []
        self._sweep_at = 0
        self._ticks = 0
        self._sweep_every = max(1, round(_SWEEP_EVERY / poll_interval))  # in ticks
        self._sweep_interval = self._sweep_every * poll_interval          # in seconds
        self._stat_cost = 5e-6                  # seconds per stat, measured as the sweep goes
        self._warned: dict[str, str] = {}       # non-regular names warned about -> what they were
        self._forgotten: deque[str] = deque()   # names to see as new (appended by any thread)
        self._trouble: str | None = None
        self.came_back = False                  # it could not be looked at for a while: a blind spell
        self.directory_id: _DirId | None = None  # the directory locked (attach): the only one looked into
        self.moved = False                      # the directory at the path is another one now
        self._dir_fd: int | None = None
        self._dir_fd_id: _DirId | None = None

    @property
    def in_trouble(self) -> bool:
        """The directory cannot be looked at now."""
        return self._trouble is not None

    def attach(self, directory_id: _DirId) -> None:
        """Look only into the directory with this identity, whose lock the
        harness holds now: one made anew is not looked into before its lock
        is taken (``moved`` says so)."""
        self.directory_id, self.moved = directory_id, False
        self._own = _own_names(self.directory, self._history)

    def close(self) -> None:
        """Let go of the directory descriptor."""
        self._close_dir()

    def _open_dir(self) -> None:
        """A descriptor of the directory, for the sweep's stats: a name is
        looked up in it alone, not along the whole path."""
        self._close_dir()
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._dir_fd, self._dir_fd_id = fd, _directory_id(os.fstat(fd))

    def _close_dir(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = self._dir_fd_id = None

    def forget(self, name: str) -> None:
        """Whatever has this name next is new, even a file that got the old
        one's inode number and times (any thread)."""
        self._forgotten.append(name)

    def scan(self, startup: bool = False) -> _Changes | None:
        """Look at the directory as cheaply as the rules allow: one stat of it
        when its mtime says no name was created, deleted or renamed; a listing
        (and a stat of each new or replaced name) when it does, or when its
        last change is too recent to trust; and a self-paced sweep of per-file stats
        for rewrites in place.  None: nothing changed, or the directory cannot
        be looked at now; or, the directory at the path being another one
        (``moved``), the old one's files, all gone."""
        if self._forgotten:  # nothing may be left of them: a name left in the sweep's list is stat'ed for ever
            forgotten = set()
            while self._forgotten:
                name = self._forgotten.popleft()
                forgotten.add(name)
                for kept in (self._snapshot, self._listing, self._warned):
                    kept.pop(name, None)
            self._sweep_names = [name for name in self._sweep_names if name not in forgotten]
            self._dir_key = None  # list it again: the names may be back already
        try:
            seen = self._look(startup)
        except (FileNotFoundError, NotADirectoryError) as exc:
            self.problem("is missing" if isinstance(exc, FileNotFoundError) else "is not a directory")
            seen = self._gone()
        except OSError as exc:
            self.problem(f"cannot be read ({exc.strerror})")
            return None  # nothing is known to have changed
        if self._trouble is not None and self._dir_key is not None:
            log.warning("events directory %s is back", self.directory)
            self._trouble = None
            self.came_back = True
        return self._changes(seen) if seen else None  # None: the idle tick

    def _look(self, startup: bool) -> dict[str, _Entry | None]:
        """The names looked at and what each is now (None: gone)."""
        dir_st = os.stat(self.directory)
        if not stat.S_ISDIR(dir_st.st_mode):
            raise NotADirectoryError(self.directory)
        dir_id = _directory_id(dir_st)
        if self.directory_id is not None and dir_id != self.directory_id:
            self.moved = True  # made anew: its lock comes first (_Hold.again)
            return self._gone()
        if self._dir_fd_id != dir_id:
            self._open_dir()
        prefix = self._prefix
        key = (dir_st.st_dev, dir_st.st_ino, dir_st.st_mtime_ns)
        seen: dict[str, _Entry | None] = {}
        if startup or key != self._dir_key or self._dir_racy or not _FAST_SCAN:
            seen_ns = time.time_ns()
            listing = _list(self.directory, self._own)
            for name in _relisted(self._listing, listing, stat_all=not _FAST_SCAN):
                seen[name] = _stat_entry(prefix + name) if name in listing else None
            if listing.keys() != self._listing.keys():
                self._sweep_names = list(listing)
            self._listing, self._dir_key = listing, key
            self._dir_racy = _is_racy(seen_ns, dir_st.st_ctime_ns)
        if _FAST_SCAN:
            self._sweep(prefix, seen)
        return seen

    def _gone(self) -> dict[str, _Entry | None]:
        """The directory looked into is no longer at the path: its files are gone with it."""
        self._listing, self._sweep_names, self._dir_key = {}, [], None
        return dict.fromkeys(self._snapshot)

    def _sweep(self, prefix: str, seen: dict[str, _Entry | None]) -> None:
        """Stat the next few known files, round robin, for rewrites in place."""
        self._ticks += 1
        if self._ticks % self._sweep_every:
            return
        names = self._sweep_names
        count = _sweep_batch(len(names), self._stat_cost, self._sweep_interval)
        if not count:
            return
        snapshot, at, fd = self._snapshot, self._sweep_at, self._dir_fd
        started = time.perf_counter()
        for _ in range(count):
            if at >= len(names):
                at = 0
            name = names[at]
            at += 1
            if name in seen:
                continue
            old = snapshot.get(name)
            if old is not None and old.sig is not None:  # the common case, kept lean:
                try:                                     # any write changes the ctime (or,
                    st = os.stat(name, dir_fd=fd)        # within one tick of it, the size)
                    if st.st_ctime_ns == old.sig[4] and st.st_size == old.sig[2]:
                        continue
                except (OSError, TypeError):  # TypeError: no descriptor
                    pass
            entry = _stat_entry(prefix + name)
            if entry != old:
                seen[name] = entry
        self._sweep_at = at
        self._stat_cost = 0.7 * self._stat_cost + 0.3 * (time.perf_counter() - started) / count

    def _changes(self, seen: dict[str, _Entry | None]) -> _Changes:
        """Take what was seen into the snapshot; a non-regular entry gets one
        warning until it changes."""
        diff = _diff(self._snapshot, seen)
        for name in diff.deleted:
            del self._snapshot[name]
            self._warned.pop(name, None)
        changed: list[tuple[str, _Sig]] = []
        unusable: list[str] = []
        found = {name: entry for name in diff.changed if (entry := seen[name]) is not None}  # all: _diff's rule
        for name, entry in sorted(found.items(), key=lambda item: (item[1].mtime_ns, item[0])):
            self._snapshot[name] = entry
            if entry.sig is not None:
                self._warned.pop(name, None)
                changed.append((name, entry.sig))
                continue
            unusable.append(name)
            if self._warned.get(name) != entry.kind:
                self._warned[name] = entry.kind
                log.warning("%s", _ignored(name, entry.kind))
        return _Changes(changed, diff.deleted, unusable)

    def problem(self, problem: str) -> None:
        """The directory cannot be looked at now, for this reason (said once)."""
        if self._trouble != problem:
            log.error("events directory %s %s; waiting for it", self.directory, problem)
            self._trouble = problem


class _Hold:
    """This harness's hold on its events directory: the lock of the
    directory it looks into, its heartbeat, and what goes with that
    directory: the scanner looks into it alone, and the journal is kept in
    it.  A directory deleted and made again is another directory, whose lock
    is taken (``again``) before anything in it is handled."""

    def __init__(self, directory: str, scanner: _Scanner, journal: _Journal) -> None:
        self.directory = directory
        self._scanner = scanner
        self._journal = journal
        self._lock: _DirectoryLock | None = None
        self._next_beat = 0.0  # on the monotonic clock
        self._held: int | None = None  # the lock file another harness holds, while this one waits for it
        self._holder = ""              # ... and what taking it said

    def take(self, waiting: bool) -> tuple[float, bool] | None:
        """Make the directory if missing and take its lock; returns its
        previous holder's trace.  EventError names the process that holds it,
        whose lock file a standby (``waiting``) keeps open, for ``wait``."""
        os.makedirs(self.directory, exist_ok=True)
        try:
            self._lock = lock = _DirectoryLock(self.directory)
        except EventError as exc:
            self._holder = str(exc)
            if waiting and self._held is None:
                try:
                    self._held = os.open(os.path.join(self.directory, _LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    pass
            raise
        if lock.directory_mode & stat.S_IWOTH:  # whoever writes a file there acts as the agent
            log.warning("events directory %s is writable by every user: anyone can act as the agent (chmod o-w %s)",
                        self.directory, self.directory)
        self._scanner.attach(lock.directory_id)
        return lock.trace

    def wait(self, stop: threading.Event, clock: Callable[[], float],
             ping: Callable[[float], None]) -> tuple[float, bool] | None:
        """A standby's: try the lock a few times a second until its holder
        has gone, or ``stop`` is set; returns that holder's trace.  The lock
        file the holder holds is kept open (``take``), and the lock is tried
        again only once that is free: a directory made anew has a free lock
        of its own while the holder lives on in the old one until it
        notices.  A holder silent for _HUNG is said to hang, once."""
        hung = False
        while not stop.wait(_STANDBY_TRY):
            ping(time.monotonic())
            if self._held is not None:
                try:
                    fcntl.flock(self._held, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # its holder lives
                else:
                    os.close(self._held)
                    self._held = None
            if self._held is None:
                try:
                    return self.take(waiting=True)
                except (EventError, OSError) as exc:
                    self._holder = str(exc)
            seen = None if self._held is None else _last_beat(self._held)  # its own, though the directory was made anew
            silent = clock() - (seen or math.inf)
            if silent > _HUNG and not hung:
                log.warning("%s, and has shown no sign of life for %s: it may hang (under systemd, WatchdogSec= "
                            "replaces a harness that hangs)", self._holder, _span(silent))
            hung = silent > _HUNG
        return None

    def again(self) -> tuple[float, bool] | None:
        """The directory was made anew: take its lock instead, and return its
        previous holder's trace (another harness may have held it while this
        one did not look).  EventError: another harness has it now."""
        lock = _DirectoryLock(self.directory)
        if self._lock is not None:
            self._lock.release(clean=False)
        self._lock = lock
        log.info("events directory %s was made anew; took its lock", self.directory)
        self._scanner.attach(lock.directory_id)
        return lock.trace

    def beat(self, now: float) -> None:
        """A sign of life in the lock file at ``now``."""
        if self._lock is not None:
            self._lock.beat(now=now)

    def keep_alive(self, now: float, mono: float) -> None:
        """Every _HEARTBEAT: the lock file's mtime says when this harness was
        last alive (on its clock), and the journal forgets what is done."""
        if mono >= self._next_beat:
            self.beat(now)
            self._journal.compact()  # what fell due before the beat is no concern of the next
            self._next_beat = mono + _HEARTBEAT

    def release(self, now: float) -> None:
        """Let go of the directory (a clean stop at ``now``): its lock and the scanner's descriptor."""
        if self._lock is not None:
            self._lock.release(now=now)  # once: it closes its descriptor only once
        if self._held is not None:
            os.close(self._held)
            self._held = None
        self._scanner.close()


# ---------------------------------------------------------------------------
# The schedule: due times on a heap, cancelled by generation
# ---------------------------------------------------------------------------


class _Schedule:
    """When each file is next due, as in ``sched``: a heap of ``(due, seq,
    file, generation, action)`` on the wall clock, ``action`` being "fire" or
    "retry" (read the file again).  What is due is kept on the file's own
    record (``_File.due``); cancelling a file gives its record a new
    generation, so its old entries are dead where they lie (compacted away
    when they pile up).  No I/O and no clock of its own: every decision
    takes ``now``."""

    def __init__(self, files: Mapping[str, _File]) -> None:
        self._files = files  # the live records: how many entries may be live
        self._heap: list[tuple[float, int, _File, int, str]] = []
        self._seq = itertools.count()
        self._anchor: tuple[float, float] | None = None  # (wall, monotonic) at the last wake

    @staticmethod
    def cancel(f: _File) -> None:
        """Everything pending for the file is dead."""
        f.generation += 1
        f.due = None

    def push(self, f: _File, due: float, action: str = "fire") -> None:
        if action == "fire":
            f.due = due
        heapq.heappush(self._heap, (due, next(self._seq), f, f.generation, action))
        if len(self._heap) > 2 * len(self._files) + 64:
            self._compact()

    def next_due(self) -> tuple[float, str] | None:
        """The earliest entry's due time and action (it may be dead: waking
        for it early is harmless)."""
        return (self._heap[0][0], self._heap[0][4]) if self._heap else None

    def pop_due(self, now: float) -> Iterator[tuple[float, _File, str]]:
        """Yield ``(due, file, action)`` for each live entry due at ``now``,
        earliest first; entries pushed meanwhile are seen if due too."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, f, generation, action = heapq.heappop(heap)
            if f.generation != generation:
                continue  # cancelled
            if action == "fire":
                f.due = None
            yield due, f, action

    def _compact(self) -> None:
        """Drop dead entries: a far-future event rewritten again and again
        would otherwise leave one behind per version until its old due time."""
        self._heap[:] = [entry for entry in self._heap if entry[2].generation == entry[3]]  # in place:
        heapq.heapify(self._heap)                                                           # pop_due holds it

    def notice_clock_step(self, now: float, mono: float) -> None:
        """Due times are wall-clock instants, so a stepped clock needs nothing
        but a log line: forward, what is due fires once; back, nothing fires
        twice, because each name has at most one live firing."""
        if self._anchor is not None:
            wall0, mono0 = self._anchor
            drift = (now - wall0) - (mono - mono0)
            if abs(drift) > 1.0:
                log.warning("the wall clock stepped %s by %.1f s", "forward" if drift > 0 else "back", abs(drift))
        self._anchor = (now, mono)


def _spin_until(clock: Callable[[], float], due: float, give_up: float) -> None:
    """Busy-wait the last fraction of a millisecond; never past ``give_up``
    on the monotonic clock, in case the wall clock steps back."""
    while clock() < due and time.monotonic() < give_up:
        pass


# ---------------------------------------------------------------------------
# Channel queues and the worker pool that empties them
# ---------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Job:
    """One run on a channel's queue: an event occurrence or a submitted fn."""

    channel: str
    event: Event | None = None
    fn: Callable[[], object] | None = None
    file: _File | None = None      # its file's record, and
    generation: int | None = None  # ... that record's generation when it was queued
    final: bool = False               # its file is deleted once it has run
    sig: _Sig | None = None
    digest: int | None = None
    due: float | None = None       # the occurrence's due time, for the history
    id: int | None = None          # in the journal

    @property
    def occurrence(self) -> Event:
        """The event of a job the files queued (a submitted function's job has none)."""
        if self.event is None:
            raise TypeError(f"a job on channel {self.channel} runs a function, not an event")
        return self.event


@dataclass(eq=False, slots=True)
class _Channel:
    """One channel's queue.  It is *ready* (in the ready queue) while a job
    waits and none runs; a pool worker then takes its next job."""

    id: str
    waiting: deque[_Job] = field(default_factory=deque)
    running: _Job | None = None
    thread: int | None = None      # ident of the thread running its job
    ready: bool = False


class _Interrupted(Exception):
    """Raised by a handler that was cut short at shutdown: the event did not
    run to its end, so its file is kept for the next start."""


def _is_async(fn: object) -> bool:
    # B004 is about testing callability; this reads an instance's __call__ to see whether it is async.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


async def _awaited(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


class _Loop:
    """The bridge to the event loop that a coroutine callback runs on: the
    worker calls the callback and waits for its coroutine, so that the
    channel's next job waits too."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, needed: bool, on_lost: Callable[[], None]) -> None:
        self.loop = loop
        self.needed = needed  # a callback is a coroutine function
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._gone = False

    def find(self) -> None:
        """None given: the loop running now, if any (TypeError if needed)."""
        asyncio = sys.modules.get("asyncio")  # not imported: no loop can be running
        if self.loop is None and asyncio is not None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
        if self.loop is None and self.needed:
            raise TypeError("a coroutine handler or on_error needs an event loop: call start() "
                            "inside one (or use 'async with'), or pass loop=")

    def closed(self) -> bool:
        """The loop a callback needs is closed: its events could never run."""
        if self.needed and self.loop is not None and self.loop.is_closed():
            self.lost()
            return True
        return False

    def call(self, fn: Callable[..., object], *args: object) -> object:
        """Call a callback on this worker thread; if it gives a coroutine, run
        that on the loop and wait here."""
        result = fn(*args)
        if not inspect.isawaitable(result):
            return result
        import asyncio
        import concurrent.futures
        loop = self.loop
        if loop is None:
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(f"{fn!r} returned an awaitable, but there is no event loop to run it on")
        wrapper = _awaited(result)
        try:
            future = asyncio.run_coroutine_threadsafe(wrapper, loop)
        except RuntimeError:  # the loop is closed
            wrapper.close()
            if inspect.iscoroutine(result):
                result.close()
            self.lost()
            raise _Interrupted("the event loop is closed") from None
        while True:
            try:
                return future.result(timeout=0.25)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() or not loop.is_running():  # stopped: nothing will run it
                    future.cancel()
                    self.lost()
                    raise _Interrupted("the event loop stopped while it ran") from None
            except concurrent.futures.CancelledError:
                raise _Interrupted("cancelled on the event loop") from None

    def lost(self) -> None:
        """The loop the coroutines run on is closed or stopped: tell the
        watcher, once."""
        with self._lock:
            if self._gone:
                return
            self._gone = True
        self._on_lost()


def _start_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name="mom_events-worker", daemon=True)
    thread.start()
    return thread


class _Channels:
    """One queue per channel, run one job at a time, at most ``max_queued``
    waiting, channels concurrently, by a pool of worker threads that sizes
    itself; and the bridge that runs a callback's coroutine on ``loop``.

    It knows nothing of files.  A job is run as ``perform(job)`` (a submitted
    fn by itself) on a worker, without this part's lock held.

    A channel is kept only while a job of it runs, waits or it is ready:
    files may name a new channel every time, and a channel with nothing to
    do costs nothing (``_retire``)."""

    def __init__(self, perform: Callable[[_Job], None], max_queued: int,
                 call: Callable[[Callable[[], object]], object]):
        self._perform = perform
        self._max_queued = max_queued
        self._call = call  # a submitted fn's (it may be a coroutine function)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # idle workers wait on it
        self._done = threading.Condition(self._lock)  # a job finished or a worker went
        self._queues: dict[str, _Channel] = {}
        self._ready: deque[_Channel] = deque()
        self._workers = 0                     # pool threads alive
        self._starting = 0                    # ... of which not yet at work
        self._idle = 0                        # ... of which waiting for work
        self._busy_since: dict[int, float] = {}  # thread ident -> when its job started
        self._closed = False
        self._linger = _LINGER
        self._spawn: Callable[[Callable[[], None]], object] = _start_thread
        self._spawning: int | None = None  # the thread in self._spawn, while it is

    # -- the queues ------------------------------------------------------------

    def put(self, job: _Job, admitted: Callable[[], None]) -> str:
        """Queue an occurrence: "queued", "full" when its channel already has
        ``max_queued`` waiting (the running one not counted), or "closed"
        after ``close``.  ``admitted()`` runs just before the job can start,
        so that what it records comes before anything its run records."""
        with self._lock:
            if self._closed:
                return "closed"
            channel = self._queues.get(job.channel)
            if channel is not None and len(channel.waiting) >= self._max_queued:
                return "full"
            admitted()
            channel = self._channel(job.channel)
            channel.waiting.append(job)
            self._kick(channel)
            return "queued"

    def submit(self, channel_id: str, fn: Callable[[], object]) -> bool:
        """Queue ``fn`` unless the channel runs or has anything waiting."""
        with self._lock:
            channel = self._queues.get(channel_id)
            if self._closed or channel is not None and (channel.running is not None or channel.waiting):
                return False
            channel = self._channel(channel_id)
            channel.waiting.append(_Job(channel_id, fn=fn))
            self._kick(channel)
            return True

    def withdraw(self, job: _Job) -> bool:
        """Take a job out of its queue; False if it is not waiting there
        (it started, or was dropped)."""
        with self._lock:
            channel = self._queues.get(job.channel)
            if channel is None or job not in channel.waiting:
                return False
            channel.waiting.remove(job)  # a channel left empty is ready: its worker retires it
            return True

    def merge(self, job: _Job, final: bool) -> bool:
        """Fold a new occurrence into ``job`` if it still waits (its file goes
        after it, if ``final``); False if it started or was dropped.  Under the
        lock: a worker takes a job, and reads it, only under it."""
        with self._lock:
            channel = self._queues.get(job.channel)
            if channel is None or job not in channel.waiting:
                return False
            job.final |= final
            return True

    def waiting(self, channel_id: str) -> int:
        with self._lock:
            channel = self._queues.get(channel_id)
            return len(channel.waiting) if channel else 0

    def running(self, channel_id: str) -> bool:
        with self._lock:
            channel = self._queues.get(channel_id)
            return channel is not None and channel.running is not None

    def close(self) -> list[_Job]:
        """Drop what waits, run nothing more; idle workers go.  Returns the
        jobs dropped (none the second time)."""
        with self._lock:
            self._closed = True
            dropped = [job for channel in self._queues.values() for job in channel.waiting]
            for channel in list(self._queues.values()):
                channel.waiting.clear()
                channel.ready = False
                self._retire(channel)  # a running one goes when its job ends
            self._ready.clear()
            self._work.notify_all()
            return dropped

    def wait(self, timeout: float | None) -> list[str]:
        """Wait up to ``timeout`` (None: for good) for running jobs; the
        channels still running then.  A job that calls this (a callback
        stopping the watcher) is not waited for."""
        me = threading.get_ident()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                busy = sorted(c.id for c in self._queues.values() if c.running is not None and c.thread != me)
                remaining = None if deadline is None else deadline - time.monotonic()
                if not busy or remaining is not None and remaining <= 0:
                    return busy
                self._done.wait(remaining)

    def in_job(self) -> bool:
        """Is the calling thread running one of the jobs?"""
        with self._lock:
            return threading.get_ident() in self._busy_since

    def _channel(self, channel_id: str) -> _Channel:
        channel = self._queues.get(channel_id)
        if channel is None:
            channel = self._queues[channel_id] = _Channel(channel_id)
        return channel

    def _retire(self, channel: _Channel) -> None:
        """Forget a channel with nothing running, waiting or ready; the next
        job for its ID makes it anew.  A ready one is left to the worker that
        takes it from the ready queue, so that one ID never has two."""
        if (channel.running is None and not channel.waiting and not channel.ready
                and self._queues.get(channel.id) is channel):
            del self._queues[channel.id]

    def _kick(self, channel: _Channel) -> None:
        """A job waits on the channel: make it ready, unless one of its jobs
        runs (the worker kicks it again when that ends) or it is ready already."""
        if self._closed or channel.running is not None or channel.ready:
            return
        channel.ready = True
        self._ready.append(channel)
        self._staff()

    # -- the worker pool ---------------------------------------------------------

    def spawn(self, start: Callable[[Callable[[], None]], object]) -> None:
        """Start workers with ``start`` instead of a thread each; they leave
        as soon as no channel is ready (a test runs them in turn)."""
        self._spawn, self._linger = start, 0

    def staff(self) -> None:
        """``_staff`` for the scheduler's tick."""
        if not self._ready:  # the idle tick takes no lock
            return
        with self._lock:
            self._staff()

    def stand_by(self) -> None:
        """An event is about to fire: make sure a worker is waiting for it."""
        with self._lock:
            if not (self._idle or self._starting or self._closed):
                self._start_worker()

    def _staff(self) -> None:
        """Give ready channels a worker: wake an idle one, or start one when
        there is none on its way; a worker started while every worker's
        callback has run less than _SPAWN_AFTER waits until then (quick runs
        pass the work on without a thread more)."""
        if not self._ready or self._closed:
            return
        if self._idle:
            self._work.notify()
            return
        if self._starting or len(self._busy_since) < self._workers:
            return  # a worker is on its way to the ready queue
        self._start_worker()

    def _start_worker(self) -> None:
        started = False

        def work() -> None:
            """A worker, for spawn to call once, later, on a thread no job of this pool runs on."""
            nonlocal started
            me = threading.get_ident()
            if started or self._spawning == me or me in self._busy_since:  # it would wait for itself
                raise RuntimeError("a worker from spawn= runs once, after spawn returns, and not inside a "
                                   "callback on the same thread")
            started = True
            self._work_loop()

        self._spawning = threading.get_ident()
        try:
            self._spawn(work)
        except Exception as exc:  # "can't start new thread": the ones there carry on
            log.error("cannot start a worker (%s); %d running", exc, self._workers)
            return
        finally:
            self._spawning = None
        self._workers += 1
        self._starting += 1

    def _wait_to_start(self) -> bool:
        """A new worker, while every other one is busy: wait until each has
        run its callback _SPAWN_AFTER, in case one is quick and takes the work
        itself.  Waits without the scheduler (its naps are long), and on the
        pool's condition, so that close() ends the wait at once.  False: the
        work was taken meanwhile, and this worker is not needed."""
        waited = False
        while self._ready and not self._idle and not self._closed and self._busy_since:
            delay = max(self._busy_since.values()) + _SPAWN_AFTER - time.monotonic()
            if delay <= 0:
                return True
            waited = True
            self._work.wait(delay)
        return not waited or bool(self._ready)

    def _work_loop(self) -> None:
        """A pool worker: take the next ready channel, run its next job, put
        the channel back if more wait; go when nothing was ready for _LINGER."""
        with self._lock:
            needed = self._wait_to_start()
            self._starting -= 1
            try:
                me = threading.get_ident()
                while needed and self._wait_for_work():
                    channel = self._ready.popleft()
                    channel.ready = False
                    if not channel.waiting:
                        self._retire(channel)  # its jobs were withdrawn meanwhile
                        continue
                    job = channel.waiting.popleft()
                    channel.running, channel.thread = job, me
                    self._busy_since[me] = time.monotonic()
                    self._staff()  # more are ready: pass it on
                    self._lock.release()
                    try:
                        self._run(job)
                    finally:
                        self._lock.acquire()
                        del self._busy_since[me]
                    channel.running = channel.thread = None
                    if channel.waiting:
                        self._kick(channel)
                    self._retire(channel)
                    self._done.notify_all()
            finally:
                self._workers -= 1
                self._done.notify_all()

    def _wait_for_work(self) -> bool:
        """True once a channel is ready; False to let the worker go."""
        deadline = None
        while not self._ready:
            if self._closed or self._linger <= 0:
                return False
            now = time.monotonic()
            deadline = deadline or now + self._linger
            if now >= deadline:
                return False
            self._idle += 1
            try:
                self._work.wait(deadline - now)
            finally:
                self._idle -= 1
        return not self._closed

    def _run(self, job: _Job) -> None:
        """Whatever a job raises is reported, never propagated: no worker dies."""
        try:
            if job.fn is None:
                self._perform(job)
            else:
                self._call(job.fn)
        except _Interrupted as exc:
            log.warning("function submitted to channel %s: %s", job.channel, exc)
        except BaseException as exc:
            what = "function submitted to channel" if job.fn is not None else "internal error on channel"
            log.error("%s %s raised: %s", what, job.channel, exc, exc_info=exc)


# ---------------------------------------------------------------------------
# The history: one JSON line per outcome, for the agent and its operator
# ---------------------------------------------------------------------------

def _iso(timestamp: float | None, timespec: str = "milliseconds") -> str | None:
    """A POSIX timestamp in local time with its offset, in UTC where local
    time would leave years 1-9999, or as a number beyond; None stays None."""
    if timestamp is None:
        return None
    for zone in (None, UTC):
        try:
            return datetime.fromtimestamp(timestamp, zone).astimezone(zone).isoformat(timespec=timespec)
        except (OverflowError, ValueError, OSError):
            continue
    return f"{timestamp:.3f}"


class _History:
    """Appends one JSON object per line to a file, opened for each line, so
    that a file renamed away (logrotate) or truncated in place
    (``copytruncate``) is simply the file at the path next time.  Each line
    is one ``write`` (more only after a short one) on an ``O_APPEND``
    descriptor, under a lock, so lines never interleave.  A history that
    cannot be written is logged once and never stops events.  Every line
    parses (jq and pandas stop at one that does not): a short write (a full
    disk, a file size limit) is followed by the rest, or else rolled back,
    and a cut line at the end of the file (a harness died mid-write) is cut
    off before the next line is written."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._broken = False

    def record(self, outcome: str, filename: str, event: Event | None = None, **fields: float | str | None) -> None:
        """``fields`` ending in ``At`` are POSIX timestamps; None ones are left out."""
        try:
            entry: dict[str, object] = {
                "time": _iso(time.time()), "filename": filename,
                "type": event.type if event else None, "channelId": event.channel_id if event else None,
                "outcome": outcome}
            entry.update((key, _iso(value) if key.endswith("At") and not isinstance(value, str) else value)
                         for key, value in fields.items() if value is not None)
            data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")
        except Exception as exc:  # that line's alone: never the event's
            log.error("%s: cannot write its %r line to the history (%s)", filename, outcome, exc)
            return
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)  # event texts
                try:
                    self._append(fd, self._cut_last_line(fd, os.fstat(fd).st_size), data)
                finally:
                    os.close(fd)
            except OSError as exc:
                if not self._broken:
                    log.error("cannot write the history %s (%s); events go on without it",
                              self.path, exc.strerror or exc)
                    self._broken = True
                return
            if self._broken:
                log.warning("the history %s is written again", self.path)
                self._broken = False

    @staticmethod
    def _append(fd: int, size: int, line: bytes) -> None:
        """Write all of ``line`` after ``size`` bytes, or none of it: what a
        failed write left is cut back off (or, if that fails too, at the next
        line's ``_cut_last_line``)."""
        rest = memoryview(line)
        try:
            while rest:
                written = os.write(fd, rest)
                if not written:
                    raise OSError("nothing was written")
                rest = rest[written:]
        except OSError:
            try:  # not when it shrank meanwhile (copytruncate): cutting "back" would pad it with zeros
                if os.fstat(fd).st_size > size:
                    os.ftruncate(fd, size)  # it succeeds on a full disk and under a file size limit
            except OSError:
                pass
            raise

    def _cut_last_line(self, fd: int, size: int) -> int:
        """Make the file end in a newline; returns its size then.  A last
        line that lacks only its newline gets one; a cut line (a harness
        died writing it, or a failed write could not be cut back) is cut
        off.  A file whose end cannot be read is taken as whole."""
        try:
            if not size or os.pread(fd, 1, size - 1) == b"\n":
                return size
            keep = size - 1
            while keep:
                start = max(0, keep - (1 << 16))
                newline = os.pread(fd, keep - start, start).rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
            try:
                whole = size - keep <= MAX_FILE_BYTES and isinstance(_decode_json(os.pread(fd, size - keep, keep),
                                                                                  None), dict)
            except EventError:
                whole = False
            if whole:
                os.write(fd, b"\n")
                return size + 1
            os.ftruncate(fd, keep)
        except OSError:
            return size
        log.warning("the history %s ended in a cut line (a failed write, or a harness that died writing it): "
                    "cut off its last %d bytes", self.path, size - keep)
        return keep


def _last_outcomes(path: str, limit: int = 8 << 20) -> dict[str, dict[str, object]]:
    """Each file's last history entry, from the last ``limit`` bytes; the
    lines of a notice's run (rejected, missed) are not its file's outcome."""
    last: dict[str, dict[str, object]] = {}
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        size = file.tell()
        file.seek(max(0, size - limit))
        if size > limit:
            file.readline()  # a partial first line
        for line in file:
            try:
                entry = json.loads(line)
                if entry["type"] not in _NOTICES:
                    last[entry["filename"]] = entry
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short, or not ours
    return last


# ---------------------------------------------------------------------------
# The watcher: what the scanner saw becomes schedule entries, and what falls
# due becomes channel jobs
# ---------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _File:
    """What the watcher knows of one event file."""

    name: str
    sig: _Sig                         # the stat signature of what was read last (or, before that, seen)
    digest: int | None = None
    event: Event | None = None
    timing: _Timing = _ON_ARRIVAL     # when its event runs
    attempts: int = 0                 # parse retries so far
    first_look: _Startup | None = None  # found by a first look (start-up, after a blind spell)
    queued: _Job | None = None     # its last occurrence put on a queue (it may have started since)
    ignored: frozenset[str] = frozenset()  # unknown fields said in the log (shared while none)
    spent: bool = False               # ran or was dropped, but could not be deleted
    due: float | None = None          # its next firing, while one is scheduled
    generation: int = 0               # the schedule's entries for it are live while they have this

    @property
    def parsed(self) -> Event:
        """Its valid event: what was scheduled or queued for it has one."""
        if self.event is None:
            raise TypeError(f"{self.name} has no valid event")
        return self.event


def _log_error(event: Event, exc: BaseException) -> None:
    log.error("%s: handler failed: %s", event.filename, exc, exc_info=exc)


class _Runs:
    """Running an occurrence, on a worker thread: the one part of a file's
    life that is not the writer's.  It touches no file's record: what a run
    needs travels on its job, and a run that finished goes on ``finished``
    for the writer to take in (``_Files.settle``)."""

    def __init__(self, journal: _Journal, record: _Record, call: Callable[..., object],
                 handler: Callable[[Event], object], on_error: Callable[[Event, BaseException], object],
                 clock: Callable[[], float]) -> None:
        self._journal = journal
        self._record = record
        self._call = call  # the callbacks' (_Loop.call)
        self._handler = handler
        self._on_error = on_error
        self._clock = clock
        self.finished: deque[_Job] = deque()  # appended by workers, taken in by the writer

    def dropped(self, job: _Job) -> None:
        """A job dropped from its queue as the watcher stops (any thread).  A
        notice stays in the journal, for the next harness to send."""
        if job.event is not None:
            self._journal.fired(job, queued=False)
            self._record("cancelled", job.event.filename, job.event, dueAt=job.due,
                         detail="the harness stopped before it ran" +
                                ("; it is sent at the next start" if job.event.type in _NOTICES and job.id else
                                 "" if job.event.type in _NOTICES else "; the file stays"))

    def perform(self, job: _Job) -> None:
        """A worker runs one occurrence: the handler (on_error if it raised),
        its journal records and history lines; its file is the writer's to
        delete.  How late it runs is measured now, as it starts."""
        event = job.occurrence
        started = time.time()
        if job.due is not None and (event.late is not None or self._clock() - job.due >= _LATE):
            event = replace(event, late=max(0.0, self._clock() - job.due))
        run = {"id": job.id, "file": event.filename, "type": event.type, "channelId": event.channel_id,
               "due": job.due, "sig": None if job.sig is None else list(job.sig), "digest": job.digest,
               "final": job.final}
        # Journaled first: a harness that dies from here on is said to have cut it short.
        self._journal.write({"kind": "run", **run})
        self._record("started", event.filename, event, dueAt=job.due)  # after "queued": see _put
        _running.journal, _running.run = self._journal, run  # for --exec, to journal its command under
        try:
            finished, error = self._execute(event)
        finally:
            _running.journal = _running.run = None
        self._record("done" if error is None else "failed", event.filename, event, dueAt=job.due,
                     startedAt=started, finishedAt=time.time(), detail=error)
        self._journal.write({"kind": "end", **run, "ran": finished, "by": "harness"})  # the history has it
        if finished and job.final:
            self.finished.append(job)

    def _execute(self, event: Event) -> tuple[bool, str | None]:
        """Run the handler; whatever it raises goes to on_error, never further.
        Returns whether it ran to its end (not when cut short at shutdown:
        then its file stays) and what went wrong, in one line, if anything."""
        try:
            self._call(self._handler, event)
        except _Interrupted as exc:
            log.warning("%s: %s; its file stays", event.filename, exc)
            return False, f"interrupted: {exc}"
        except BaseException as exc:  # no worker ever dies
            try:
                self._call(self._on_error, event, exc)
            except _Interrupted:
                pass
            except BaseException as second:
                log.error("%s: on_error raised: %s", event.filename, second, exc_info=second)
            return True, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return True, None


class _Outbox:
    """What the files send to the channels, occurrences and notices to the
    agent, each journaled and recorded in the history as it goes, so that a
    harness killed at any moment leaves the next one what it needs."""

    def __init__(self, channels: _Channels, journal: _Journal, history: _History | None, max_queued: int,
                 notify: bool, zone: ZoneInfo | None) -> None:
        self.journal = journal
        self.history = history
        self._channels = channels
        self._max_queued = max_queued
        self._notify = notify
        self._zone = zone  # the user's: an interval's due time is shown in it

    def record(self, outcome: str, filename: str, event: Event | None = None, **fields: float | str | None) -> None:
        """History, if kept; costs one call when not (it runs on the firing path)."""
        if self.history is not None:
            self.history.record(outcome, filename, event, **fields)

    def occurrence(self, f: _File, due: float | None, late: float | None, final: bool) -> str:
        """Put an occurrence of the file's event, due at ``due``, on its
        channel's queue, unless the previous one still waits there ("merged":
        that one is the last now, if ``final``).  After the ``final`` one has
        run, the file is deleted.  Otherwise as ``put``."""
        event = f.parsed
        occurrence = replace(event, due=_aware(f.timing, due, self._zone), late=late)
        job = _Job(event.channel_id, event=occurrence, file=f, generation=f.generation,
                   sig=f.sig, digest=f.digest, due=due, final=final, id=self.journal.next_id())
        if f.queued is not None and self._channels.merge(f.queued, final):
            log.info("%s: its previous occurrence is still waiting on channel %s; not queued again",
                     f.name, event.channel_id)
            self.record("coalesced", f.name, event, dueAt=due, detail="its previous occurrence is still waiting")
            self.journal.fired(job, queued=False)
            return "merged"
        outcome = self.put(job)
        if outcome == "queued":
            f.queued = job
        return outcome

    def withdraw(self, job: _Job) -> bool:
        """Take an occurrence out of its queue, if it still waits there."""
        withdrawn = self._channels.withdraw(job)
        if withdrawn:
            self.journal.fired(job, queued=False)
        return withdrawn

    def counted(self, f: _File, verdict: _Verdict, now: float) -> None:
        """The occurrences of a periodic file missed before ``now`` are said,
        once: the journal's "counted" keeps the next harness from saying them again."""
        missed = verdict.missed
        caught = "; running the latest now, late (catchUp)" if f.parsed.catch_up and verdict.action != "drop" else ""
        detail = (f"{missed}{' or more' if missed >= _MISSED_COUNT else ''} occurrence{'s' if missed > 1 else ''} "
                  f"fell due while no harness was running{caught}")
        log.info("%s: %s", f.name, detail)
        self.record("missed", f.name, f.event, dueAt=verdict.catch_up, detail=detail)
        self.journal.write({"kind": "counted", "file": f.name, "mtime": f.sig[3], "until": now})

    def announce(self, f: _File, notice: Event | None) -> _Job | None:
        """A notice to the agent about one of its files (rejected, missed), on
        the channel the file names, unless notices are turned off: journaled
        before the file is renamed or deleted, so that it is sent even if the
        harness dies then (``tell`` queues it, ``retract`` takes it back)."""
        if notice is None or not self._notify:
            return None
        job = _Job(notice.channel_id, event=notice, id=self.journal.next_id())
        fields = {"filename": notice.filename, "type": notice.type, "channel_id": notice.channel_id,
                  "text": notice.text, "at": notice.at, "schedule": notice.schedule, "timezone": notice.timezone}
        self.journal.write({"kind": "notice", "id": job.id, "file": f.name, "sig": list(f.sig), "event": fields})
        return job

    def tell(self, notice: _Job | None) -> None:
        if notice is not None:
            self.put(notice)

    def retract(self, notice: _Job | None) -> None:
        if notice is not None:
            self.journal.write({"kind": "end", "id": notice.id, "ran": False})

    def resend(self, notices: list[dict[str, Any]]) -> None:
        """Queue the notices a harness that died did not send (``_recover``)."""
        for notice in notices:
            event = Event(**notice["event"])
            log.info("%s: sending the %s the last harness did not send", event.filename, _NOTICES[event.type])
            self.put(_Job(event.channel_id, event=event, id=notice["id"]))

    def put(self, job: _Job) -> str:
        """Onto its channel's queue: "queued", "full" (discarded, and said
        so) or "closed" (the watcher stops: nothing is queued or recorded,
        and the file stays for the next start)."""
        event = job.occurrence

        def admitted() -> None:  # before the job can start: its run's records come after these
            self.record("queued", event.filename, event, dueAt=job.due)
            self.journal.fired(job, queued=True)

        outcome = self._channels.put(job, admitted)
        if outcome == "full":
            self.journal.fired(job, queued=False)
            log.warning("%s: channel %s already has %d events waiting; discarding this %s",
                        event.filename, event.channel_id, self._max_queued,
                        _NOTICES.get(event.type, "occurrence"))
            self.record("discarded", event.filename, event, dueAt=job.due,
                        detail=f"{self._max_queued} events already waiting on the channel")
        return outcome


class _Files:
    """What the watcher knows of each event file and what becomes of it: it
    turns what the scanner saw into schedule entries (read, judged, retried,
    scheduled, rejected, dropped), what falls due into channel jobs, and the
    runs that finished into deleted files.

    One thread at a time changes it, the *writer*: the scheduler thread while
    it runs, then the one that closes the watcher.  So it has no lock.  What
    it sends goes through ``_Outbox``; the runs are ``_Runs``', on the workers."""

    def __init__(self, directory: str, scanner: _Scanner, out: _Outbox, finished: deque[_Job]) -> None:
        self.directory = directory
        self._known: dict[str, _File] = {}
        self._racy: dict[str, _File] = {}  # those of them read too soon after their last write to trust
        self.schedule = _Schedule(self._known)
        self._scanner = scanner
        self._out = out
        self._finished = finished  # the runs that ended whose files go (_Runs.finished)

    def apply(self, changes: _Changes, now: float, first_look: _Startup | None = None) -> None:
        """Act on what a scan found, each file on its own; ``first_look``: the
        scan was the first look at the directory in a while."""
        for name in changes.deleted:
            self._guarded(name, self._forget, name, "file removed")
        for name in changes.unusable:
            self._guarded(name, self._forget, name, "file is no longer a regular file")
        for name, sig in changes.changed:
            f = self._known.get(name)
            if f is None or f.sig != sig:  # not what was read already (the writer finished after the scan)
                self._guarded(name, self._changed, name, sig, now, first_look)

    def recheck(self, now: float, first_look: _Startup | None = None) -> None:
        """git's racy rule: a content read less than a timestamp tick after
        its last write may change again without changing the stat, so it is
        read again at every scan until that is older; one that differs is
        read anew."""
        for f in list(self._racy.values()):
            read_ns = time.time_ns()
            try:
                data, _ = _read_file(os.path.join(self.directory, f.name))
            except (OSError, _NotRegular):
                continue  # the next scan sees what happened to it
            if _digest(data) != f.digest:
                log.debug("%s: content changed under an unchanged stat", f.name)
                self._guarded(f.name, self._changed, f.name, f.sig, now, first_look)
            elif not _is_racy(read_ns, f.sig[4]):
                del self._racy[f.name]

    def run_due(self, now: float) -> None:
        """Fire (or read again) what is due at ``now``, offering the GIL
        every batch, so that in a burst of thousands the workers run what
        is queued already."""
        for count, (at, f, action) in enumerate(self.schedule.pop_due(now), 1):
            if action == "retry":
                self._guarded(f.name, self._load, f, now)
            else:
                self._guarded(f.name, self._fire, f, at, now)
            if count % _BATCH == 0:
                time.sleep(0)

    def scheduled(self) -> int:
        """How many files have a firing scheduled."""
        return sum(f.due is not None for f in self._known.values())

    def settle(self) -> None:
        """Take in the runs the workers finished: delete their files."""
        while self._finished:
            job = self._finished.popleft()
            self._guarded(job.occurrence.filename, self._delete_after_run, job)

    def _changed(self, name: str, sig: _Sig, now: float, first_look: _Startup | None = None) -> None:
        """A name appeared or changed: drop what was scheduled, read it again."""
        f = self._known.get(name)
        if f is None:
            f = self._known[name] = _File(name, sig)
        self._cancel(f, "file changed")
        f.sig, f.attempts, f.first_look = sig, 0, first_look
        self._load(f, now)

    def _load(self, f: _File, now: float) -> None:
        read_ns = time.time_ns()
        try:
            data, sig = _read_file(os.path.join(self.directory, f.name))
        except (FileNotFoundError, _NotRegular) as exc:  # gone, or swapped since the scan
            self._gone(f.name, "file removed" if isinstance(exc, OSError) else "file is no longer a regular file")
            return
        except OSError as exc:  # said once: it is read again only when a scan sees it change
            log.error("%s: cannot be read (%s); leaving it alone until it changes", f.name, exc.strerror or exc)
            return
        digest = _digest(data)
        if f.spent and digest == f.digest:
            return  # the content that already ran and could not be deleted
        if f.attempts and (sig != f.sig or digest != f.digest):
            f.attempts = 0  # the writer is still at work (even if only to truncate): the retries start over
        f.spent = False
        f.sig, f.digest = f.sig if sig == f.sig else sig, digest  # the scanner's tuple, shared: 10,000 files, 1.4 MB
        if _is_racy(read_ns, sig[4]):
            self._racy[f.name] = f
        else:
            self._racy.pop(f.name, None)
        try:
            event, f.timing, ignored = _parse(data, f.name)
        except _NeedsCroniter as exc:  # said once, as above
            f.event = None
            log.error("%s; leaving the file in place", exc)
            written = _as_written(data)
            self._out.record("invalid", f.name, type=written.get("type"), channelId=written.get("channelId"),
                             detail=exc.reason + "; the file stays")
            return
        except EventError as exc:
            f.event = None
            self._retry_later(f, now, exc, data)
            return
        f.event, f.attempts = event, 0
        seen = frozenset(ignored)  # frozenset() is one shared object: a file with none costs nothing
        if seen != f.ignored:  # said once per file, until the set changes
            if seen:
                log.info("%s: %s", f.name, _unknown_fields(ignored))
            f.ignored = seen
        self._plan(f, event, now, data)

    def _retry_later(self, f: _File, now: float, exc: EventError, data: bytes) -> None:
        """The writer may be mid-write: retry after 100, 200 and 400 ms."""
        if f.attempts < len(_RETRY_DELAYS):
            delay = _RETRY_DELAYS[f.attempts]
            f.attempts += 1
            log.debug("%s; retrying in %d ms", exc, delay * 1000)
            self.schedule.push(f, now + delay, "retry")
            return
        self._invalid(f, exc.reason, data)

    def _invalid(self, f: _File, reason: str, data: bytes | None = None) -> None:
        """Give up on the file: it is not an event the harness can run.  It is
        kept, unchanged, as NAME.json.rejected for the agent to fix and move
        back (deleted if it cannot be renamed), and the agent is told on the
        channel the file names.  ``data``: the content judged, which
        ``f.sig`` describes (None: read it now)."""
        self._cancel(f)
        if data is None:
            try:
                data, f.sig = _read_file(os.path.join(self.directory, f.name))
            except (OSError, _NotRegular) as exc:
                log.error("%s: %s; it cannot be read now (%s): the next scan says what became of it",
                          f.name, reason, getattr(exc, "strerror", None) or exc)
                self._gone(f.name)
                return
            f.digest = _digest(data)
        rejected, written = f.name + ".rejected", _as_written(data)
        taken = notice = None
        try:  # the take may fail as the rename would (a read-only directory): then so may the deletion
            taken = _take(self.directory, f.name, f.sig, f.digest)
            if taken is None:  # what has the name now is read anew
                self._gone(f.name)
                return
            notice = self._out.announce(f, _rejected_event(f.name, reason, written, f"The file is now {rejected}: "
                                                           f"fix it and move it back to {f.name}."))
            os.replace(taken, os.path.join(self.directory, rejected))
        except OSError as exc:
            log.error("%s: %s; cannot rename it to %s (%s), so deleting it",
                      f.name, reason, rejected, exc.strerror or exc)
            self._out.retract(notice)
            fate = f"It could not be kept as {rejected}, so it was deleted: write it again, fixed."
            notice = self._out.announce(f, _rejected_event(f.name, reason, written, fate))
            if not self._delete(f, taken):
                self._out.retract(notice)  # it said why; it never runs in this process
                notice = None
        else:
            log.error("%s: %s; renamed to %s", f.name, reason, rejected)
            self._gone(f.name)
        self._out.record("invalid", f.name, type=written.get("type"), channelId=written.get("channelId"), detail=reason)
        self._out.tell(notice)

    def _guarded(self, name: str, step: Callable[[*_Ts], None], *args: *_Ts) -> None:
        """One file's step.  An unexpected error in it is that file's alone:
        logged once with its name, and the file is treated as invalid, while
        the other files of the same scan, heap or queue go on."""
        try:
            step(*args)
        except Exception as exc:
            log.debug("%s: traceback of the unexpected error", name, exc_info=exc)
            f = self._known.get(name)
            reason = f"unexpected error while handling it: {type(exc).__name__}: {exc}"
            if f is None:
                log.error("%s: %s", name, reason)
                return
            try:
                self._invalid(f, reason)  # what has the name now: the error may have come before a read
            except Exception as second:
                log.error("%s: %s, and again while giving up on it (%s); it will not run while this harness runs",
                          name, reason, second)
                self._cancel(f)
                f.spent, f.event = True, None

    def _plan(self, f: _File, event: Event, now: float, data: bytes) -> None:
        """A valid event (``data``, just read): act on the judge's verdict."""
        verdict = _judge(event, f.timing, f.sig[3], now, f.first_look)
        if verdict.missed:  # a periodic event's occurrences that fell in a downtime
            self._out.counted(f, verdict, now)
        if verdict.action in ("schedule", "run") and (note := f.timing.note(now)) is not None:
            log.info("%s: %s", f.name, note)
        if verdict.action == "schedule":
            if verdict.catch_up is not None:
                self._enqueue(f, verdict.catch_up, verdict.late, final=False)
            assert verdict.due is not None  # the judge's contract: "schedule" says when
            self.schedule.push(f, verdict.due)
        elif verdict.action == "run":  # once, and the file goes (a periodic's last, caught up)
            if verdict.late is not None:
                log.info("%s: %s; running it now, late", f.name, verdict.reason)
            self._enqueue(f, verdict.due, verdict.late, final=True)
        elif verdict.action == "reject":
            self._invalid(f, verdict.reason, data)
        else:
            log.info("%s: %s; deleting it without running", f.name, verdict.reason)
            self._out.record(verdict.outcome, f.name, event, dueAt=verdict.due)
            notice = None
            if verdict.outcome == "missed":
                # the judge's contract: only a first look misses, and what was missed was due
                assert verdict.due is not None and f.first_look is not None
                notice = self._out.announce(f, _missed_notice(event, f.timing, verdict.due, f.first_look))
            if self._delete(f):
                self._out.tell(notice)
            else:
                self._out.retract(notice)

    def _fire(self, f: _File, due: float, now: float) -> None:
        """Queue the occurrence due, and schedule the next, if any: after
        the last one has run, the file goes."""
        after = f.timing.next_after(now, f.sig[3] / 1e9)  # from now: no catch-up
        if math.isfinite(after):
            self.schedule.push(f, after)
        elif isinstance(f.timing, _Periodic):
            log.info("%s: this is its last occurrence; the file is deleted once it has run", f.name)
        self._enqueue(f, due, now - due if now - due >= _LATE else None, math.isinf(after))  # late: a step, a sleep

    def _enqueue(self, f: _File, due: float | None, late: float | None, final: bool) -> None:
        """Send an occurrence (``_Outbox.occurrence``); the ``final`` one
        discarded by a full queue ends its file here and now."""
        event = f.parsed
        if (self._out.occurrence(f, due, late, final) == "full" and final and self._delete(f)
                and event.type == "periodic"):
            self._out.record("ended", f.name, event, detail="its last occurrence was discarded: the queue was full")

    def _cancel(self, f: _File, why: str | None = None) -> None:
        """Kill its schedule entries and its occurrence waiting in a queue;
        with ``why``, what was pending goes to the history as cancelled."""
        due, queued = f.due, f.queued
        withdrawn = queued is not None and self._out.withdraw(queued)
        if why and f.event is not None and (due is not None or withdrawn):
            self._out.record("cancelled", f.name, f.event, dueAt=due or (queued.due if queued is not None else None),
                             detail=why + (" while waiting in the queue" if withdrawn else " before it was due"))
        self.schedule.cancel(f)
        f.queued = None

    def _forget(self, name: str, why: str | None = None) -> None:
        """The file is gone (or is no longer a regular file)."""
        self._racy.pop(name, None)
        f = self._known.pop(name, None)
        if f is not None:
            self._cancel(f, why)

    # -- deleting a file once it has run ------------------------------------------

    def _delete_after_run(self, job: _Job) -> None:
        """An immediate, a one-shot or a periodic event's last occurrence is
        deleted once it ran, unless the file changed meanwhile: then its new
        content is a new event."""
        ran, f = job.occurrence, job.file
        if f is not None and f.generation == job.generation:  # a record forgotten was cancelled too
            event = f.event
            if self._delete(f) and ran.type == "periodic":
                self._out.record("ended", f.name, event, detail="its last occurrence has run")

    def _delete(self, f: _File, taken: str | None = None) -> bool:
        """Delete the file judged (what was read last: a record read again
        was cancelled, and its jobs with it), or what ``_take`` took of it
        already; whether it did.  Not when another file has its name now (it
        is read anew), nor when it cannot be deleted: that is logged once,
        and it never runs again in this process."""
        try:
            taken = taken or _take(self.directory, f.name, f.sig, f.digest)
            if taken is not None:
                os.unlink(taken)
        except OSError as exc:
            if taken is not None:
                _put_back(taken, os.path.join(self.directory, f.name))
            if not f.spent:
                log.error("%s: cannot delete it (%s); it will not run again while this harness runs",
                          f.name, exc.strerror or exc)
            self._cancel(f)
            f.spent, f.event = True, None
            return False
        self._gone(f.name)
        return taken is not None

    def _gone(self, name: str, why: str | None = None) -> None:
        """The name no longer holds the file judged (the harness deleted or
        renamed it, or another file has the name): forget it, and whatever
        has the name next is new, even a file with the old one's stat."""
        self._forget(name, why)
        self._scanner.forget(name)


def _checked_options(handler: object, on_error: object, poll_interval: float, max_queued: int,
                     misfire_grace: float, timezone: str | None) -> ZoneInfo | None:
    """EventsWatcher's arguments, checked as it is made, not when it first
    uses them; returns the user's zone."""
    if not callable(handler):
        raise TypeError("handler must be callable")
    if on_error is not None and not callable(on_error):
        raise TypeError("on_error must be callable")
    if not poll_interval > 0:
        raise ValueError("poll_interval must be positive")
    if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1:
        raise ValueError("max_queued must be a whole number of at least 1")
    if not misfire_grace >= 0:
        raise ValueError("misfire_grace must be zero or more seconds")
    try:
        return None if timezone is None else _zone(timezone)
    except _CronError as exc:
        raise ValueError(str(exc)) from None


class EventsWatcher:
    """Watch ``events_dir`` and call ``handler(event)`` when each event is due.

    ``handler`` runs on a worker thread, one event at a time per channel.
    ``on_error(event, exc)`` gets what the handler raised (default: log it).
    Either may be a coroutine function: it then runs on ``loop`` (default: the
    loop running when ``start()`` is called) while the channel waits for it.
    ``history`` is a file that gets one JSON line per outcome.  ``on_halt``
    is called with the reason if the watcher stops by itself.  ``standby``:
    when another harness holds the directory, wait and take over when it
    exits.  ``notify``: the handler is told, on the channel a file names, when
    the file was rejected as invalid (a ``rejected`` event; the file is kept
    as ``NAME.json.rejected``) or a one-shot was deleted unrun because it
    fell due while no harness ran (a ``missed`` event); ``notify_rejected``
    is its older name, and either False turns both off.  ``clock`` returns
    the wall-clock time as a POSIX timestamp.  ``timezone`` is the user's
    IANA zone: an interval's due time, which has no zone of its own, is shown
    in it (default: the host's).  ``spawn(work)`` starts a worker that calls
    ``work()`` (default: a thread); a worker it starts leaves as soon as no
    channel is ready, so a test can hold them and run each in turn.
    """

    def __init__(self, events_dir: str | os.PathLike[str], handler: Callable[[Event], object],
                 on_error: Callable[[Event, BaseException], object] | None = None,
                 poll_interval: float = 0.04, max_queued: int = 5,
                 clock: Callable[[], float] = time.time,
                 loop: asyncio.AbstractEventLoop | None = None, history: str | os.PathLike[str] | None = None,
                 misfire_grace: float = 0, on_halt: Callable[[str], object] | None = None, standby: bool = False,
                 notify: bool = True, notify_rejected: bool = True, systemd: bool = False,
                 timezone: str | None = None, spawn: Callable[[Callable[[], None]], object] | None = None) -> None:
        zone = _checked_options(handler, on_error, poll_interval, max_queued, misfire_grace, timezone)
        self.events_dir = os.fspath(events_dir)
        self._on_halt = on_halt or (lambda reason: None)
        self._poll_interval = poll_interval
        self._clock = clock
        self._scanner = _Scanner(self.events_dir, poll_interval, None if history is None else os.fspath(history))
        self._loop = _Loop(loop, _is_async(handler) or _is_async(on_error),
                           lambda: self._halt("the event loop closed or stopped while events were pending"))
        self._channels = _Channels(lambda job: self._runs.perform(job), max_queued, self._loop.call)
        if spawn is not None:
            self._channels.spawn(spawn)
        self._journal = _Journal(self.events_dir)
        self._out = _Outbox(self._channels, self._journal, None if history is None else _History(history),
                            max_queued, notify and notify_rejected, zone)
        self._runs = _Runs(self._journal, self._out.record, self._loop.call, handler, on_error or _log_error, clock)
        self._files = _Files(self.events_dir, self._scanner, self._out, self._runs.finished)
        self._misfire_grace = misfire_grace
        self._first_look: _Startup | None = None  # until a look at the directory succeeds
        self._looked_at: float | None = None      # the last time one did
        self._life = threading.RLock()  # start() and the beginning of the end, one at a time
        self._thread: threading.Thread | None = None  # the scheduler (or standby) thread
        self._stepped = False  # started without it: the caller takes each step()
        self._closer: threading.Thread | None = None  # the last writer: lets the directory go
        self._wake = threading.Event()  # set when stopping: a standby's wait ends at once
        self._stopping = False
        self._hold = _Hold(self.events_dir, self._scanner, self._journal)
        self._standby = standby
        self._systemd = _Systemd(os.environ if systemd else {})
        self.active = False  # holds the directory and schedules its events

    # -- public API ---------------------------------------------------------

    def start(self, thread: bool = True) -> EventsWatcher:
        """Take the directory's lock, scan it, act on what is there, and start
        the scheduler thread.  Returns once the start-up scan is done.  Raises
        EventError naming the process when another harness watches it.
        ``thread=False``: no scheduler thread; the caller takes each step()
        itself, as ``sched.scheduler.run(blocking=False)`` lets it."""
        self._loop.find()
        with self._life:
            if self._closer is not None:
                raise RuntimeError("this EventsWatcher was stopped; make a new one to watch again")
            if self._thread is not None or self._stepped:
                raise RuntimeError("an EventsWatcher can be started only once")
            try:
                trace = self._hold.take(waiting=self._standby and thread)
            except EventError as exc:
                if not self._standby or not thread:  # a standby waits on a thread of its own
                    raise
                log.warning("%s; standing by to take over when it exits", exc)
                self._systemd.send("READY=1", f"STATUS=standing by: {exc}")
                target = self._stand_by
            else:
                try:
                    self._startup(self._clock(), trace)
                except BaseException:
                    self._begin_closing()  # lets the directory go once whatever started has ended
                    raise
                self._systemd.send("READY=1", f"STATUS=watching {self.events_dir}")
                target = self._run
                if not thread:
                    self._stepped = True
                    return self
            self._thread = threading.Thread(target=target, name="mom_events-scheduler", daemon=True)
            self._thread.start()
        return self

    def submit(self, channel_id: str, fn: Callable[[], object]) -> bool:
        """Run ``fn()`` on the channel's queue, as a user's own message would
        (a coroutine function runs on the loop).  Returns False, running
        nothing, while the channel runs or has anything waiting."""
        if self._loop.loop is None and _is_async(fn):
            raise TypeError("a coroutine function needs an event loop: pass loop= or start() inside one")
        return self._channels.submit(channel_id, fn)

    def step(self, now: float | None = None, scan: bool = True) -> float | None:
        """One step of the scheduler of a watcher started with
        ``start(thread=False)``, as its thread takes it: take in the runs that
        ended, look at the directory (if ``scan``), and fire what is due at
        ``now`` (default: ``clock()``).  Returns when the next firing or
        retry is due, if any: the thread sleeps until then or its next scan."""
        if not self._stepped:
            raise RuntimeError("step() is for a watcher started with start(thread=False)")
        if self._stopping:
            return None
        now = self._clock() if now is None else now
        self._hold.keep_alive(now, time.monotonic())
        upcoming = self._tick(now, scan)
        return None if upcoming is None else upcoming[0]

    def scheduled_count(self) -> int:
        """How many events have a firing scheduled."""
        return self._files.scheduled()

    def stop(self, timeout: float = 30) -> list[str]:
        """Stop scheduling, drop what waits in the queues (the files stay), and
        wait up to ``timeout`` seconds for running callbacks.  Returns the
        channels still running then.  The directory stays locked until the
        last of them has ended and its file is deleted (or kept): a standby
        never runs a file whose run is still going on."""
        deadline = time.monotonic() + timeout
        closer = self._begin_closing()
        busy = self._channels.wait(timeout)
        if not busy and threading.current_thread() is not self._thread and not self._channels.in_job():
            # The closer waits for the scheduler thread's nap to end, then lets the directory go.
            closer.join(max(deadline - time.monotonic(), 2 * _NAP))
        return busy

    def __enter__(self) -> EventsWatcher:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def astop(self, timeout: float = 30) -> list[str]:
        """``stop()`` for a coroutine: the waiting happens off the loop, so
        the callbacks running on it can finish."""
        import asyncio
        return await asyncio.to_thread(self.stop, timeout)

    async def __aenter__(self) -> EventsWatcher:
        import asyncio
        self._loop.find()
        await asyncio.to_thread(self.start)  # the start-up scan reads files: not on the loop
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.astop()

    # -- the scheduler thread -----------------------------------------------

    def _startup(self, now: float, trace: tuple[float, bool] | None, waiting_since: float | None = None) -> None:
        """The start-up, and again in a directory made anew: a takeover from the
        harness whose ``trace`` the lock file kept, or from none (its own journal, copied back)."""
        self.active = True
        accounts, cut, notices, mine = _recover(self.events_dir, self._journal, self._out.record)  # before all else
        self._first_look = _takeover((now, True) if mine else trace, now, self._misfire_grace, waiting_since,
                                     accounts, cut)
        self._files.schedule.notice_clock_step(now, time.monotonic())
        self._poll(now)
        self._out.resend(notices)
        self._hold.beat(now)  # only now: killed during its start-up, it leaves the previous trace

    def _stand_by(self) -> None:
        """Another harness holds the directory: take over once it has gone, however it went."""
        waiting_since = self._clock()
        trace = self._hold.wait(self._wake, self._clock, self._systemd.ping)
        if self._wake.is_set():
            return
        try:
            self._startup(self._clock(), trace, waiting_since)
        except Exception as exc:
            log.debug("traceback of the failed takeover", exc_info=exc)
            self._halt(f"cannot take over {self.events_dir}: {type(exc).__name__}: {exc}")
            return
        log.warning("took over %s: the harness that held it has gone (%d events scheduled)",
                    self.events_dir, self._files.scheduled())
        self._systemd.send(f"STATUS=watching {self.events_dir} (took over)")
        self._run()

    def _tick(self, now: float, poll: bool = True) -> tuple[float, str] | None:
        """One step on wall-clock ``now``: take in the finished runs, look at
        the directory (if ``poll``), fire or read again what is due, staff the
        ready channels.  Returns the next entry's due time and action, if any.
        Only the writer calls it: the scheduler thread, or step()."""
        self._files.settle()
        if poll:
            self._poll(now)
        self._files.run_due(now)
        self._channels.staff()
        return self._files.schedule.next_due()

    def _run(self) -> None:
        """Poll every interval; between polls sleep until the next due time,
        wake a millisecond early and spin the rest (precise firing)."""
        next_poll = time.monotonic() + self._poll_interval
        failing: set[str] = set()  # the internal errors of the ticks since the last good one
        while not self._stopping:
            timeout = self._poll_interval
            try:
                if self._loop.closed():
                    break
                # Clock reads are system calls on some virtual machines: an
                # idle tick makes as few as it can.
                now, mono = self._clock(), time.monotonic()
                self._systemd.ping(mono)
                polling = mono >= next_poll
                if polling:
                    next_poll = mono + self._poll_interval
                    self._hold.keep_alive(now, mono)
                self._files.schedule.notice_clock_step(now, mono)
                upcoming = self._tick(now, polling)
                timeout = next_poll - mono
                if upcoming is not None:
                    due, action = upcoming
                    until_due = due - self._clock()
                    if until_due < _LEAD and action == "fire":
                        self._channels.stand_by()
                        _spin_until(self._clock, due, time.monotonic() + 2 * _LEAD)
                        continue
                    timeout = min(timeout, until_due - _LEAD)
                failing.clear()
            except Exception as exc:  # a bug must not silence every event for good
                what = f"{type(exc).__name__}: {exc}"
                if what not in failing and len(failing) < 16:  # each once while it keeps failing
                    log.error("internal error in the scheduler (%s); carrying on", what, exc_info=exc)
                    failing.add(what)
            if timeout > 0:
                time.sleep(min(timeout, _NAP))

    def _poll(self, now: float) -> None:
        """Scan and act on what changed.  The first look in a while (at start-up,
        after a spell in which the directory could not be looked at, or in one
        made anew) judges what it finds by the start-up rules for that spell."""
        changes = self._scanner.scan(startup=self._first_look is not None)
        if self._scanner.moved:  # made anew: taken over as at a start, for a harness may have run there
            if changes is not None:
                self._files.apply(changes, now)  # what the old one held is gone
            try:
                trace = self._hold.again()
            except EventError as exc:  # another harness has it
                self._halt(str(exc))
            except OSError as exc:
                self._scanner.problem(f"cannot be locked ({exc.strerror})")
            else:
                self._startup(now, trace)
            return
        first_look = None
        if not self._scanner.in_trouble:
            if self._scanner.came_back:
                self._scanner.came_back = False
                if self._first_look is None:
                    self._first_look = _Startup(now, self._looked_at, now, self._misfire_grace)
            first_look, self._first_look, self._looked_at = self._first_look, None, now
            self._files.recheck(now, first_look)
        if changes is not None:
            self._files.apply(changes, now, first_look)

    def _begin_closing(self) -> threading.Thread:
        """Stop scheduling and queueing at once (what waits is dropped, its
        files stay), and hand over to the closer, once; returns the closer."""
        with self._life:
            if not self._stopping:
                self._systemd.send("STOPPING=1", "STATUS=stopping")
            self._stopping = True
            self._wake.set()
            for job in self._channels.close():
                self._runs.dropped(job)
            if self._closer is None:
                self._closer = threading.Thread(target=self._close, name="mom_events-closer", daemon=True)
                self._closer.start()
            return self._closer

    def _close(self) -> None:
        """The last writer: once the scheduler thread has gone, wait for every
        run to end, take in what finished (deleting its files), then let the
        history and the directory go."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._channels.wait(None)
        self._files.settle()
        self._journal.close()
        self._hold.release(self._clock())
        self.active = False

    def _halt(self, reason: str) -> None:
        """Stop for good from inside: the harness can no longer do its job."""
        log.error("%s; stopping", reason)
        self._begin_closing()
        self._on_halt(reason)


# ---------------------------------------------------------------------------
# The agent's manual: what to put in its system prompt
# ---------------------------------------------------------------------------


def _host_timezone() -> str | None:
    """The host's IANA timezone name: ``TZ``'s when it is set (a name, or a
    path into a zoneinfo tree; a POSIX rule such as ``EST5EDT,M3.2.0,M11.1.0``
    names none), else ``/etc/localtime``'s or ``/etc/timezone``'s; None when
    none of them names one, as the host's clock follows ``TZ`` alone."""
    tz = os.environ.get("TZ", "").removeprefix(":")
    if tz:
        candidates = [tz.partition("/zoneinfo/")[2] if "/zoneinfo/" in tz else tz]
    else:
        candidates = [os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]]
        try:
            with open("/etc/timezone", encoding="utf-8") as file:
                candidates.append(file.read().strip())
        except (OSError, UnicodeDecodeError):
            pass
    for name in candidates:
        if name and not name.startswith("/"):
            try:
                _zone(name)
                return name
            except _CronError:
                continue
    return None


def _offset_text(offset: timedelta) -> str:
    minutes = round(offset.total_seconds() / 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


_PROMPT = """\
## Scheduled events

You can wake yourself up later: write an event, a small JSON file, into `{dir}/`, and when it is
due a harness sends you its `text` as a message in its channel. Write a file to schedule, `rm` it to
cancel.{which_channel}

### Time

Your user's timezone is {tz_text}: a time they give without a zone is there, and so are "today" and
"tomorrow". This host's clock may be in another zone, so before you compute a date get the time there,
with its offset: `{now}`.

### The three types

**immediate**: runs as soon as the harness sees the file.
```json
{immediate}
```

**one-shot**: runs once, at `at`. Give `at` with its UTC offset, or give `timezone` and write `at` as
wall time there:
```json
{one_shot}
```
```json
{one_shot_wall}
```
A wall time that daylight saving skips (02:30 on a spring-forward night) runs when the gap ends (03:00);
one it repeats runs on its first pass. Cron times of day follow the same rule, as cron does.

**periodic**: runs until you delete the file: on a cron `schedule` in an IANA `timezone`; or `every` so
long (`90m`, `1h30m`, `2d`; elapsed time), first one interval after the file is written (rewriting it
starts anew); or both, with `for`: every so long from each run of the schedule, for so long, its end
included (the third example: 09:00, 09:45, ... 16:30 on weekdays). Optional: `start` (no run before
it) and `until` (a run at exactly `until` still happens, none after; then the file is deleted), both with
offsets, and `"catchUp": true` (below).
```json
{periodic}
```
```json
{interval}
```
```json
{window}
```

Immediate and one-shot files delete themselves once they have run.

### Cron schedules

`minute hour day-of-month month day-of-week`, read in the event's `timezone`:
- `0 9 * * 1-5`: weekdays at 09:00; `30 14 * * 1`: Mondays at 14:30; `0 0 1 * *`: every 1st at 00:00
- `0 17 * * 5#L` (or `5L`): the last Friday of every month; `0 9 * * 5#2,5#4`: the 2nd and 4th Fridays
- `0 9 L * *`: the last day of every month; `LW`: its last weekday; `0 9 15W * *`: the weekday
  nearest the 15th

When both day fields are restricted, a day matching *either* runs: `0 17 22-31 * 5` runs every day
from the 22nd *and* every Friday. A `+` before the day-of-week asks for both: `0 9 1-7 * +1` is the
first Monday. `@daily` works too. A step starts again every hour: `*/45 * * * *` runs at :00 and :45,
not every 45 minutes; use `every` for that.

### Creating, checking, cancelling

Write a temporary name (one starting with `.` or not ending in `.json` is ignored), check it, then `mv`
it into place, so the harness never reads a half-written file:
```bash
cat > {qdir}/.dentist.json.tmp <<'JSON'
{one_shot}
JSON
{check} {qdir}/.dentist.json.tmp --check && mv {qdir}/.dentist.json.tmp {qdir}/dentist.json
```
- A file's name is its identity: keep it unique.
- List: `ls {qdir}/*.json`. Cancel: `rm {qdir}/dentist.json` (a run waiting its turn too).
- Change: write it again; its old schedule is dropped.
- Check them all (one line per file: its next runs and daylight saving's surprises, or what is wrong):
  `{check} {qdir} --check`. If a check fails, fix the temporary file, or `rm` it.
- What runs in the next 7 days, in time order: `{check} {qdir} --check --next 7d`

### Rejected files

A file the harness cannot run (invalid JSON, a missing or misspelt field such as `catchup`, a bad
schedule, a time already past when written) is renamed to `NAME.json.rejected`, unchanged, and you get
`[EVENT:NAME.json:rejected] why` on its channel. Fix it, check it, and resubmit it:
`mv {qdir}/NAME.json.rejected {qdir}/NAME.json` (or `rm` it).

### What you will receive

```
[EVENT:dentist.json:one-shot:{at}] (due {at}) Remind Mario about the dentist at 10:00
```
or `[EVENT:name.json:immediate] text`, `[EVENT:name.json:periodic:every 90m] (due ...) text`. `due`
says which run this is, in the event's timezone (an `every`'s in {tz}); `, late by 3 minutes` follows
when the run starts late (a busy channel, a harness down). Write `text` as an
instruction to your future self.

### When the harness was down

A one-shot that fell due while no harness ran is deleted unrun, and you get `[EVENT:NAME.json:missed]
It was due at ...`: tell the user, and write it again if it still matters. A periodic event skips what
it missed, unless its file has `"catchUp": true`: then it runs once, late, for the latest missed run,
however long ago.

### Limits and debouncing

Each channel runs one event at a time; at most 5 more wait, and the rest are discarded. Debounce a
program that reports many things: let it append items to a file, and write an event only when none is
pending:
```bash
echo "$ITEM" >> {qdir}/.inbox-items
[ -e {qdir}/inbox.json ] || {{
  echo {inbox} > {qdir}/.inbox.json.tmp && mv {qdir}/.inbox.json.tmp {qdir}/inbox.json; }}
```
"""


_HISTORY_PROMPT = """
### Did it run? The history

Every outcome is appended to `{history}`, one JSON object per line (`queued`, `started`, `done`,
`failed`, `missed`, `invalid`, `cancelled`, `interrupted`, ...; `detail` says why), with `time`, `filename`,
`type`, `channelId`, `dueAt`. The last lines for one file:
```bash
grep -F '"filename": "dentist.json"' {history} | tail -n 5
```
"""


def _check_command() -> str:
    """The command that runs this module's CLI from any working directory:
    this interpreter and this file, by absolute paths."""
    import shlex
    if not sys.executable:  # an embedded interpreter: the installed script, if any
        return "mom-events"
    return f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))}"


def events_prompt(events_dir: str | os.PathLike[str], timezone: str | None = None, channel_id: str | None = None,
                  history: str | os.PathLike[str] | None = None) -> str:
    """A Markdown section for an agent's system prompt that teaches it to
    schedule, inspect and cancel its own events.  ``timezone`` is the one the
    agent should assume (default: the host's); an unknown name, or a
    ``channel_id`` no file could name, raises ValueError.  ``history``: the
    harness's history file, if it keeps one."""
    import shlex
    directory = os.fspath(events_dir).rstrip("/") or "/"
    if channel_id is not None and (fault := _channel_fault(channel_id)) is not None:
        raise ValueError(f"channel ID {channel_id!r} {fault}")
    if timezone is None:
        timezone = _host_timezone()
    tz_text = timezone
    if timezone is None:  # no IANA name to be found: state the offset, use UTC in examples
        timezone = "UTC"
        tz_text = f"UTC{_offset_text(_utc_offset(datetime.now().astimezone()))} (no IANA name is known)"
    try:
        zone = _zone(timezone)
    except _CronError as exc:
        raise ValueError(str(exc)) from None
    channel = channel_id or "CHANNEL_ID"
    tomorrow = datetime.now(zone).date() + timedelta(days=1)
    at = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 9, tzinfo=zone).isoformat()

    def example(kind: str, **fields: str) -> str:
        return json.dumps({"type": kind, "channelId": channel, **fields}, ensure_ascii=False)

    year_end = datetime(tomorrow.year, 12, 31, 23, 59, 59, tzinfo=zone).isoformat()
    known = tz_text == timezone  # an IANA name, to give the commands
    now = f"TZ={shlex.quote(timezone)} date -Iseconds" if known else "date -Iseconds"
    check = _check_command() + (f" --timezone {shlex.quote(timezone)}" if known else "")
    text = _PROMPT.format(
        dir=directory, qdir=shlex.quote(directory), check=check, tz=timezone, tz_text=tz_text, at=at, now=now,
        which_channel="" if channel_id else " Put the channel to wake you in into `channelId`.",
        immediate=example("immediate", text="New GitHub issue opened: #42"),
        one_shot=example("one-shot", text="Remind Mario about the dentist at 10:00", at=at),
        one_shot_wall=example("one-shot", text="Call the plumber", at=f"{tomorrow.isoformat()}T17:00:00",
                              timezone=timezone),
        periodic=example("periodic", text="Check the inbox and post a summary", schedule="0 9 * * 1-5",
                         timezone=timezone, until=year_end),
        interval=example("periodic", text="Check the build", every="90m"),
        inbox=shlex.quote(example("immediate", text=f"New items in {directory}/.inbox-items")),
        window=example("periodic", text="Poll the deploy queue", every="45m", **{"for": "8h"},
                       schedule="0 9 * * 1-5", timezone=timezone))
    if history is not None:
        text += _HISTORY_PROMPT.format(history=os.fspath(history))
    return text


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def _one_line(text: str) -> str:
    r"""``text`` as one line an operator can trust: each non-printing
    character (controls such as newline, ESC and NUL, the Unicode line and
    paragraph separators, lone surrogates from undecodable names) escaped as
    ``repr`` shows it: ``\n``, ``\x1b``, ``\u2028``.  Letters of any script
    stay as they are, and so do backslashes: the line is for reading, and
    ``--json`` is the exact form.  A file's text, channel or name can then
    never start a line of its own."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


class _OneLineFormatter(logging.Formatter):
    """The CLI's log lines: every record is one line, escaped as by
    ``_one_line``, whatever names and texts it quotes (a traceback too)."""

    def format(self, record: logging.LogRecord) -> str:
        return _one_line(super().format(record))


def _event_json(event: Event, fired_at: float) -> str:
    return json.dumps({
        "firedAt": _iso(fired_at), "filename": event.filename, "type": event.type,
        "channelId": event.channel_id, "text": event.text, "message": event.message,
        "at": event.at, "schedule": event.schedule, "timezone": event.timezone, "late": event.late,
        "dueAt": event.due.isoformat() if event.due else None,
    })


def _printer(as_json: bool) -> Callable[[Event], None]:
    """The CLI's handler: one flushed line per event on stdout (the plain one
    escaped by ``_one_line``; JSON escapes by itself)."""
    lock = threading.Lock()

    def handler(event: Event) -> None:
        fired_at = time.time()
        if as_json:
            line = _event_json(event, fired_at)
        else:  # a ] in the name is escaped too: the [EVENT:...] tag ends at its first ]
            tagged = replace(event, filename=event.filename.replace("]", r"\x5d"))
            line = f"{_iso(fired_at)} {_one_line(event.channel_id)} {_one_line(tagged.message)}"
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return handler


# -- --exec: one command per event ------------------------------------------

_LEFTOVER_GRACE = 0.2  # seconds a finished command's children have to leave its session (setsid -f)
_LINE_LIMIT = 1 << 16  # a longer line of command output is logged in pieces
_ENV_LIMIT = 1 << 16   # bytes in a MOM_EVENT_* value; Linux takes 128 KiB a variable, 2 MiB in all
_SIGNAL_TICK = 0.2     # seconds: how soon the CLI's main thread runs a signal handler


class _CommandFailed(Exception):
    """The --exec command exited non-zero, died of a signal, or timed out."""


def _command_bytes(text: str) -> bytes:
    """``text`` as a command gets it: UTF-8, with a file name's undecodable
    bytes as they were (surrogateescape) and any other lone surrogate (JSON
    allows ``"\\ud800"``, UTF-8 does not) as the six characters ``\\ud800``."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" and not "\udc80" <= c <= "\udcff" else c
                       for c in text).encode("utf-8", "surrogateescape")


def _env_value(text: str) -> bytes:
    """A MOM_EVENT_* value that execve takes whatever the event: NUL, which
    no environment can hold, as ``\\0``, and at most _ENV_LIMIT bytes, cut
    before a character with a marker.  stdin has the whole message."""
    data = _command_bytes(text).replace(b"\0", b"\\0")
    if len(data) <= _ENV_LIMIT:
        return data
    marker = f" [cut: {len(data)} bytes in all; the whole message is on stdin]".encode()
    cut = _ENV_LIMIT - len(marker)
    for _ in range(3):  # back to the first byte of a UTF-8 character
        if data[cut] & 0xC0 != 0x80:
            break
        cut -= 1
    return data[:cut] + marker


# A command's output stream as it is relayed: its log level, and a line not yet ended.
_Stream: TypeAlias = tuple[int, bytearray]


# The shell that runs a command ($1) keeps the journal ($2) of the run ($3)
# true whatever becomes of the harness.  It starts the command only once its
# session is journaled: it first reads the line "go" from stdin, which the
# supervisor writes after journaling it (the harness dead before, it reads the
# end of stdin and exits unrun); the command reads the message after that line.
# When the command ends, it journals that the run ran, as the harness would if
# it were still alive to, unless the command was cut short: killed by SIGPIPE
# (the harness, which reads its output, is dead), or stopped (SIGTERM, which
# this shell outlives to see how the command ends) and not successful.  Then it
# ends as the command did (killed by the same signal).  Its own stderr is
# /dev/null, for a shell reports a child killed by a signal there; the command
# gets the real one back (fd 3) in a shell of its own.
_WRAPPER = ('exec 3>&2 2>/dev/null; IFS= read -r go && [ "$go" = go ] || exit 125; trap "stopped=1" TERM; '
            '/bin/sh -c \'exec 2>&3 3>&-; exec /bin/sh -c "$0"\' "$1"; s=$?; '
            'if [ -n "$2" ] && [ "$s" != 141 ] && { [ "$s" = 0 ] || [ -z "$stopped" ]; }; then '
            'printf \'{"kind": "end", "id": %s, "ran": true, "status": %d}\\n\' "$3" "$s" >>"$2"; fi; '
            'trap - TERM; [ "$s" -gt 128 ] && kill -"$((s - 128))" $$; exit "$s"')


class _Commands:
    """Runs ``/bin/sh -c CMD`` for each event, with the message on stdin and
    the event in the environment (never on the command line).  Its output is
    logged line by line, prefixed with the event's file name; the harness's
    stdout stays the clean stream of events.

    A run is the session the shell starts (its process group, and whatever
    groups its processes move to), and it ends when none of them is left,
    not when the shell exits: dash does not exec the last command, so a
    SIGTERM can end the shell and spare the command, and a command can leave
    children behind.  So SIGTERM, then SIGKILL, go to all of them whatever
    became of the shell, and what a command leaves behind when it exits gets
    the same (after _LEFTOVER_GRACE, in which a ``setsid -f`` child leaves),
    as systemd does with a service's control group.  A program meant to
    outlive its run starts a session of its own (setsid)."""

    def __init__(self, command: str, timeout: float | None):
        self.command = command
        self.timeout = timeout
        self._lock = threading.Lock()
        self._deadlines: dict[subprocess.Popen[bytes], float] = {}  # when to send SIGTERM
        self._stopped = False

    def __call__(self, event: Event) -> None:
        fields = {"FILE": event.filename, "TYPE": event.type, "CHANNEL": event.channel_id, "TEXT": event.text,
                  "MESSAGE": event.message, "SCHEDULE": _when(event) or event.type,
                  "DUE": event.due.isoformat() if event.due else ""}
        env: dict[str, str | bytes] = {**os.environ,
                                       **{f"MOM_EVENT_{name}": _env_value(value) for name, value in fields.items()}}
        import subprocess
        journal, run = getattr(_running, "journal", None), getattr(_running, "run", None)
        with self._lock:
            if self._stopped:
                raise _Interrupted("not started: the harness is shutting down")
            try:
                proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, "/bin/sh", self.command,
                                         journal.path if journal and run else "", str(run and run["id"])],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env, start_new_session=True)
            except OSError as exc:
                raise _CommandFailed(f"cannot start the command: {exc}") from None
            self._deadlines[proc] = time.monotonic() + self.timeout if self.timeout else math.inf
        if journal is not None and run is not None:  # before the wrapper starts the command
            journal.write({"kind": "run", **run, "sid": proc.pid, "start": _process_start(proc.pid)})
        try:
            killed = self._supervise(proc, event)
        finally:
            with self._lock:
                del self._deadlines[proc]
        if killed == "shutdown":
            raise _Interrupted("command stopped at shutdown")
        if killed:
            raise _CommandFailed(f"timed out after {self.timeout:g} s")
        failure = _failure(proc.returncode)
        if failure is not None:
            raise _CommandFailed(failure)

    def stop_all(self) -> None:
        """Shutdown's grace ran out: SIGTERM to every running command's group
        now (SIGKILL 5 s later), and start no new one."""
        with self._lock:
            self._stopped = True
            for proc in self._deadlines:
                self._deadlines[proc] = -math.inf

    def kill_all(self) -> None:
        """SIGKILL to every run's group now, and start no new one: the harness
        is leaving (a second signal, or the end of shutdown) and no supervisor
        will be left to stop them.  It runs in a signal handler, so it waits
        for the lock only briefly: a command being started holds it until the
        command is in the table."""
        self._stopped = True
        locked = self._lock.acquire(timeout=1.0)
        try:
            for proc in list(self._deadlines):
                _signal_session(proc.pid, signal.SIGKILL)
        finally:
            if locked:
                self._lock.release()

    def _supervise(self, proc: subprocess.Popen[bytes], event: Event) -> str | None:
        """Feed stdin, log output and enforce the deadline until the run's
        group is gone, or has outlived SIGKILL by _KILL_WAIT s (logged).
        Returns None, "timeout" or "shutdown" (why we killed it).  One loop,
        not a reader thread per pipe: a daemon the command started may hold
        the pipes open for good, and a thread blocked reading them could
        never be let go, where the loop closes them."""
        import selectors
        import subprocess
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
        if stdin is None or stdout is None or stderr is None:
            raise ValueError("the command's standard streams must be pipes")  # __call__ makes them so
        pending = b"go\n" + _command_bytes(event.message + "\n")  # the wrapper's line first
        streams = {stdout.fileno(): (logging.INFO, bytearray()),
                   stderr.fileno(): (logging.WARNING, bytearray())}
        killed, stopping, kill_at, give_up_at, exited_at = None, False, math.inf, math.inf, math.inf
        with selectors.DefaultSelector() as selector:
            os.set_blocking(stdin.fileno(), False)
            selector.register(stdin.fileno(), selectors.EVENT_WRITE)
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                exited = proc.poll() is not None
                if exited:
                    exited_at = min(exited_at, now)
                    if not _run_members(proc.pid):
                        break
                with self._lock:
                    deadline = self._deadlines[proc]
                if not stopping and (now >= exited_at + _LEFTOVER_GRACE or now >= deadline):
                    if exited:
                        log.warning("%s: the command left processes behind; stopping them "
                                    "(a program meant to outlive its run starts with setsid)", event.filename)
                    else:
                        killed = "shutdown" if deadline == -math.inf else "timeout"
                    _signal_session(proc.pid, signal.SIGTERM)
                    stopping, kill_at = True, now + _KILL_AFTER
                elif now >= kill_at:
                    _signal_session(proc.pid, signal.SIGKILL)
                    kill_at, give_up_at = math.inf, now + _KILL_WAIT
                elif now >= give_up_at:
                    log.error("%s: processes of the command outlive SIGKILL; no longer waiting "
                              "for them", event.filename)
                    break
                # Tick at 0.1 s: the group's end and the deadline come without a word on the pipes.
                if selector.get_map():
                    for key, _ in selector.select(0.1):
                        if key.events & selectors.EVENT_WRITE:
                            pending = self._feed(selector, stdin, pending)
                        else:
                            self._relay(selector, key.fd, streams[key.fd], event.filename)
                elif not exited:
                    try:
                        proc.wait(0.1)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.1)
            self._drain(selector, streams, event.filename)
        for level, buffer in streams.values():
            if buffer:
                log.log(level, "%s: %s", event.filename, buffer.decode("utf-8", "backslashreplace"))
        for pipe in (stdin, stdout, stderr):
            pipe.close()
        return killed

    def _drain(self, selector: selectors.BaseSelector, streams: dict[int, _Stream], filename: str) -> None:
        """Log what the group wrote last; what a process outside it (a setsid
        daemon) still writes to the pipes is not waited for."""
        import selectors
        for key in list(selector.get_map().values()):
            if key.events & selectors.EVENT_WRITE:
                selector.unregister(key.fd)
        give_up_at = time.monotonic() + 1.0
        while selector.get_map() and time.monotonic() < give_up_at:
            ready = selector.select(0)
            if not ready:
                return
            for key, _ in ready:
                self._relay(selector, key.fd, streams[key.fd], filename)

    @staticmethod
    def _feed(selector: selectors.BaseSelector, pipe: IO[bytes], pending: bytes) -> bytes:
        try:
            pending = pending[os.write(pipe.fileno(), pending):]
        except BrokenPipeError:  # the command does not read its stdin: fine
            pending = b""
        if not pending:  # all written: close it, so the command sees the end
            selector.unregister(pipe.fileno())
            pipe.close()
        return pending

    @staticmethod
    def _relay(selector: selectors.BaseSelector, fd: int, stream: _Stream, filename: str) -> None:
        level, buffer = stream
        chunk = os.read(fd, _LINE_LIMIT)
        if not chunk:
            selector.unregister(fd)
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\n", 0, _LINE_LIMIT + 1)  # a longer line is cut at the limit, wherever it ends
            if end < 0 and len(buffer) < _LINE_LIMIT:
                return
            cut = end if end >= 0 else _LINE_LIMIT
            line = bytes(buffer[:cut]).rstrip(b"\r")
            del buffer[:cut + (end >= 0)]
            log.log(level, "%s: %s", filename, line.decode("utf-8", "backslashreplace"))


def _report(event: Event, exc: BaseException) -> None:
    """The CLI's on_error: a failed command is one line, anything else a traceback."""
    if isinstance(exc, _CommandFailed):
        log.error("%s: command failed: %s", event.filename, exc)
    else:
        _log_error(event, exc)


# -- --check: lint the directory ---------------------------------------------


_Agenda: TypeAlias = list[tuple[Iterator[float], str]]  # --check --next: each file's runs, and what it is


def _check_line(path: str, name: str, now: float, zone: tzinfo | None = None,
                agenda: _Agenda | None = None) -> tuple[bool, str]:
    """The verdict on one file, judged as an event named ``name`` that a
    running harness sees now would be: whether it will run, and a line saying
    when or what is wrong, with notes on what it may not mean.  Its times are
    the user's, in ``zone`` (None: the host's), so they can be read back to
    the user as they are.  A file that will run at a time adds its runs to
    ``agenda``, if given."""
    try:
        data, sig = _read_file(path)
        event, timing, ignored = _parse(data, name)
    except EventError as exc:
        return False, str(exc)
    except _NotRegular as exc:
        return False, _ignored(name, str(exc))
    except OSError as exc:
        entry = _stat_entry(path)
        if entry is None:
            return True, f"{name}: gone while checking"
        if entry.sig is None:  # a dangling link, a link loop
            return False, _ignored(name, entry.kind)
        return False, f"{name}: cannot be read ({exc.strerror or exc})"
    what = f"{event.type} on channel {event.channel_id}"
    verdict = _judge(event, timing, sig[3], now, None)
    notes = [_unknown_fields(ignored)] if ignored else []
    if event.schedule is not None and _compile_cron(event.schedule).days.either:
        notes.append("note: both day fields are restricted, so it runs on days matching either field "
                     "(a + before the day-of-week asks for both)")
    if verdict.action not in ("reject", "drop") and (note := timing.note(now)) is not None:
        notes.append(note)  # daylight saving's surprise, said aloud
    notes_text = "".join(f"; {note}" for note in notes)
    if verdict.action in ("reject", "drop"):
        return False, f"{name}: {what}: {verdict.reason}; it will not run{notes_text}"
    if event.type == "immediate":
        return True, f"{name}: ok: {what}, runs on arrival{notes_text}"
    # the judge's contract: a late run says by how much, a schedule says when
    due, mtime = now if verdict.action == "run" else verdict.due, sig[3] / 1e9
    assert due is not None
    if verdict.action == "run":
        assert verdict.late is not None
        said = f"{what}, runs at once, late by {_span(verdict.late)}: {verdict.reason}"
    elif event.type == "one-shot":
        said = f"{what}, at {_shown(due, zone, _own_clock(due, event, timing, zone), f'in {_span(round(due - now))}')}"
    else:
        said = _periodic_line(what, event, timing, due, now, mtime, zone)
    if agenda is not None:
        agenda.append((_runs(timing, due, mtime), f"{name}, {what}: {_clip(event.text, 60)}"))
    return True, f"{name}: ok: {said}{notes_text}"


def _periodic_line(what: str, event: Event, timing: _Timing, due: float, now: float, mtime: float,
                   zone: tzinfo | None) -> str:
    """What --check says of a periodic event whose next run is ``due``: its
    schedule, its flags in words, its next three runs and its last."""
    said = [what, f"{_when(event)}" + ("" if event.schedule is None else f" in {event.timezone}")]
    if event.start is not None:
        said.append(f"from {_bound('start', event.start, zone)}")
    if event.until is not None:
        said.append(f"until {_bound('until', event.until, zone)}")
    if event.catch_up:
        said.append("catches up one missed run (catchUp)")
    runs = list(itertools.islice(_runs(timing, due, mtime), 4))  # a fourth: whether the third is the last
    times = [_shown(when, zone, _own_clock(when, event, timing, zone),
                    f"in {_span(round(due - now))}" if k == 0 else None, "the last" if k == len(runs) - 1 else None)
             for k, when in enumerate(runs[:3])]
    last = ""
    if len(runs) > 3 and event.until is not None:
        when = _last_run(timing, runs[2], mtime)
        last = f"; last run {_shown(when, zone, _own_clock(when, event, timing, zone))}"
    return f"{', '.join(said)}; next {', '.join(times)}{last}"


def _runs(timing: _Timing, due: float, mtime: float) -> Iterator[float]:
    """An event's runs from its next, ``due``, on: a one-shot's one, a
    periodic event's every one (of its file written at ``mtime``)."""
    while math.isfinite(due):
        yield due
        due = timing.next_after(due, mtime)


def _last_run(timing: _Timing, after: float, mtime: float) -> float:
    """A periodic event's last run before its ``until``, given an instant
    ``after`` that has a run after it.  A schedule is only walked forward: it
    is looked for back from ``until``, a step twice as long each time, then
    walked forward to the end."""
    assert isinstance(timing, _Periodic) and math.isfinite(timing.until)
    back = 1.0
    while math.isinf(due := timing.next_after(max(timing.until - back, after), mtime)):
        back *= 2
    while math.isfinite(later := timing.next_after(due, mtime)):
        due = later
    return due


def _shown(when: float, zone: tzinfo | None, *remarks: str | None) -> str:
    """An instant as --check shows it: in the user's ``zone`` (None: the
    host's), ISO 8601 to the second, and the ``remarks`` that are given."""
    try:
        text = datetime.fromtimestamp(when, UTC).astimezone(zone).isoformat(timespec="seconds")
    except OverflowError:  # the year 10000 there: say it in UTC
        text = datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")
    said = [remark for remark in remarks if remark]
    return f"{text} ({', '.join(said)})" if said else text


def _own_clock(when: float, event: Event, timing: _Timing, zone: tzinfo | None) -> str | None:
    """What the event's own clock reads at ``when``, where the user's reads
    otherwise: its ``timezone``'s wall time (an interval has no zone of its
    own), or a one-shot's ``at`` as written."""
    try:
        mine = datetime.fromtimestamp(when, UTC).astimezone(zone)
    except OverflowError:  # past the year 9999 there (_shown says it in UTC)
        return None
    if event.timezone is not None and (event.schedule is not None or event.type == "one-shot"):
        own = datetime.fromtimestamp(when, _zone(event.timezone))
        if _utc_offset(own) == _utc_offset(mine):
            return None
        day = "" if own.date() == mine.date() else f"{own.date()} "
        return f"{day}{own.strftime('%H:%M:%S' if own.second else '%H:%M')} in {event.timezone}"
    if isinstance(timing, _Once) and _utc_offset(timing.at) != _utc_offset(mine):
        return f"as written: {event.at}"
    return None


def _bound(key: str, text: str, zone: tzinfo | None) -> str:
    """A periodic event's ``start`` or ``until`` in the user's ``zone``,
    named, and as written where its offset is not the user's then."""
    when = datetime.fromisoformat(text)
    mine = when.astimezone(zone)
    written = "" if _utc_offset(mine) == _utc_offset(when) else f", as written: {text}"
    return f"{mine.isoformat(timespec='seconds')} ({key}{written})"


def _unknown_fields(keys: list[str]) -> str:
    """The note on fields the harness does not know (it ignores them)."""
    quoted = ", ".join(json.dumps(_clip(key, 40), ensure_ascii=False) for key in keys[:5])
    more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
    return f"unknown field{'s' if len(keys) > 1 else ''} {quoted}{more} {'are' if len(keys) > 1 else 'is'} ignored"


def _agenda(agenda: _Agenda, upcoming: int | timedelta, now: float, zone: tzinfo | None) -> list[str]:
    """--check --next: the runs of every file that will run, merged in time
    order: the next ``upcoming`` of them, or those within that span, under a
    head line.  Each file's runs are walked only as far as they are shown."""
    merged = heapq.merge(*(zip(runs, itertools.repeat(label)) for runs, label in agenda))
    if isinstance(upcoming, timedelta):
        end, span = now + upcoming.total_seconds(), _span(upcoming.total_seconds())
        shown = list(itertools.islice(itertools.takewhile(lambda run: run[0] <= end, merged), _AGENDA_MOST + 1))
        head = f"runs in the next {span}:" if shown else f"no runs in the next {span}"
        if len(shown) > _AGENDA_MOST:
            del shown[_AGENDA_MOST:]
            head = f"the first {_AGENDA_MOST} runs in the next {span} (there are more):"
    else:
        shown = list(itertools.islice(merged, upcoming))
        count = len(shown)
        if count == upcoming:
            head = f"next {count} run{'s' if count > 1 else ''}:"
        elif shown:
            head = f"only {count} run{'s are' if count > 1 else ' is'} left:"
        else:
            head = "no runs are left"
    return [head] + [f"{_shown(due, zone, 'now' if due <= now else f'in {_span(round(due - now))}')} {label}"
                     for due, label in shown]


def _check_rejected(path: str, name: str, now: float, zone: tzinfo | None) -> str:
    """A ``NAME.json.rejected`` file, judged again as ``NAME.json``."""
    original = name.removesuffix(".rejected")
    ok, line = _check_line(path, original, now, zone)
    verdict = line.removeprefix(original + ": ")
    if ok:
        return f"{name}: rejected, valid now ({verdict.removeprefix('ok: ')}): mv it back to {original}"
    return f"{name}: rejected: {verdict}; fix it, then mv it back to {original} (or rm it)"


def _check(path: str, history: str | None = None, timezone: str | None = None,
           upcoming: int | timedelta | None = None) -> int:
    """--check: one line per event file and per rejected file of a directory,
    or for one file of any name (a draft), then a summary; 0 when every one
    will run.  With a history, each line also says the file's last outcome.
    Times are shown in the user's ``timezone`` (default: the host's, as
    --prompt assumes).  With ``upcoming`` (--next), an agenda comes before
    the summary: what runs, in time order."""
    in_directory = os.path.isdir(path)
    try:
        if in_directory:
            own = _own_names(path, history)
            with os.scandir(path) as entries:
                names = sorted(entry.name for entry in entries
                               if _is_event_name(entry.name.removesuffix(".rejected")) and entry.name not in own)
            files = [(os.path.join(path, name), name) for name in names]
        else:
            os.stat(path)
            files = [(path, os.path.basename(path))]
    except OSError as exc:
        link = _stat_entry(path) if os.path.islink(path) else None  # "No such file" would mislead
        log.error("cannot check %s: %s", path, f"it is a {link.kind}" if link else exc.strerror or exc)
        return 1
    last = {}
    if history is not None:
        try:
            last = _last_outcomes(history)
        except OSError as exc:
            log.warning("cannot read the history %s: %s", history, exc.strerror or exc)
    zone_name = timezone or _host_timezone()
    zone = None if zone_name is None else _zone(zone_name)
    now, bad = time.time(), 0
    agenda: _Agenda | None = None if upcoming is None else []
    for file, name in files:
        try:
            if in_directory and name.endswith(".rejected"):
                ok, line = False, _check_rejected(file, name, now, zone)
            else:
                ok, line = _check_line(file, name, now, zone, agenda)
        except Exception as exc:  # that file's alone
            ok, line = False, f"{name}: unexpected error while checking it: {type(exc).__name__}: {exc}"
        bad += not ok
        entry = last.get(name.removesuffix(".rejected"))
        if entry is not None:
            line += f"; last: {entry.get('outcome')} at {entry.get('time')}"
            if entry.get("detail"):
                line += f" ({entry['detail']})"
        sys.stdout.write(_one_line(line) + "\n")
    if agenda is not None and upcoming is not None:
        sys.stdout.writelines(_one_line(line) + "\n" for line in _agenda(agenda, upcoming, now, zone))
    # the last line, with what it sums up: one reader (an agent, a pipe) gets it all, in order
    sys.stdout.write(_one_line(f"checked {path}: {len(files) - bad} will run, {bad} will not") + "\n")
    sys.stdout.flush()
    return 1 if bad else 0


# -- arguments and main -------------------------------------------------------


def _seconds(text: str, zero_ok: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        raise argparse.ArgumentTypeError(f"must be a {'non-negative' if zero_ok else 'positive'} "
                                         f"number of seconds: {text!r}")
    return value


_AGENDA_MOST = 10_000  # runs an agenda shows: a span of a file every second is 604,800 a week


def _upcoming(text: str) -> int | timedelta:
    """--next: a whole count of runs, or a span as ``every`` reads one (7d, 36h)."""
    if text.isascii() and text.isdigit() and 0 < int(text[:6]) <= _AGENDA_MOST and len(text) <= 6:
        return int(text)
    try:
        return timedelta(seconds=_interval(text))
    except EventError:
        raise argparse.ArgumentTypeError(f"not a count of runs (1 to {_AGENDA_MOST}) nor a span such as 7d or "
                                         f"36h: {_clip(text)!r}") from None


def _timezone_name(text: str) -> str:
    try:
        _zone(text)
    except _CronError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _channel_id(text: str) -> str:
    if (fault := _channel_fault(text)) is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {fault}")
    return text


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mom_events",
        description="Watch a directory of JSON event files and print each event when it is due.")
    parser.add_argument("dir", nargs="?", default="events",
                        help="the events directory (default: events); with --check, also one file of any name")
    parser.add_argument("--json", action="store_true", help="print one JSON object per event instead of a text line")
    parser.add_argument("--poll", type=_seconds, default=0.04, metavar="SECONDS",
                        help="how often to look at the directory (default: 0.04)")
    parser.add_argument("--exec", metavar="CMD", dest="command",
                        help="run CMD with /bin/sh -c for each event, one at a time per channel: the message "
                             "on stdin, the event in MOM_EVENT_* variables (64 KiB each at most); its output goes "
                             "to the log; a run ends when its session is gone")
    parser.add_argument("--exec-timeout", type=_seconds, metavar="SECONDS",
                        help="a command running longer is stopped (SIGTERM to its session, SIGKILL 5 s "
                             "later) and counts as failed (default: no limit)")
    parser.add_argument("--grace", type=lambda text: _seconds(text, zero_ok=True), default=30.0, metavar="SECONDS",
                        help="on SIGTERM or SIGINT, how long running events may take to finish (default: 30); "
                             "a second signal exits at once and kills the commands")
    parser.add_argument("--misfire-grace", type=lambda text: _seconds(text, zero_ok=True), default=0.0,
                        metavar="SECONDS",
                        help="a one-shot that fell due at most this long before start-up still runs, late, "
                             "instead of being deleted (default: 0)")
    parser.add_argument("--no-notify", "--no-notify-rejected", dest="notify", action="store_false",
                        help="send no notices to a file's channel: no 'rejected' event for a file rejected as "
                             "invalid (still kept as NAME.json.rejected and logged), no 'missed' event for a "
                             "one-shot that fell due while no harness ran (still logged and in the history)")
    parser.add_argument("--standby", action="store_true",
                        help="when another harness watches DIR, wait and take over when it exits "
                             "(instead of exiting with status 2)")
    parser.add_argument("--history", metavar="PATH",
                        help="append one JSON line per outcome to PATH (e.g. DIR/.history.jsonl); with --check, "
                             "show each file's last outcome; with --prompt, tell the agent where it is")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--check", action="store_true",
                       help="judge every event file and every NAME.json.rejected in DIR (or DIR, one file of any "
                            "name, as a draft), print one line each and a summary, and exit (0: every one will "
                            "run); touches nothing and works beside a running harness")
    modes.add_argument("--prompt", action="store_true",
                       help="print the Markdown section that teaches an agent to use DIR, and exit")
    parser.add_argument("--next", type=_upcoming, metavar="N|SPAN", dest="upcoming",
                        help="with --check: then list the next N runs of all files in time order, or those within "
                             "SPAN (7d, 36h: as \"every\" reads it)")
    parser.add_argument("--channel", type=_channel_id, metavar="ID",
                        help="with --prompt: the channel ID used in the examples")
    parser.add_argument("--timezone", type=_timezone_name, metavar="TZ",
                        help="the user's IANA timezone (default: the host's): the one the agent should assume "
                             "(--prompt), --check's times are shown in, and an interval's due time is given in")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    noise.add_argument("-q", "--quiet", action="store_true", help="log only warnings and errors")
    parser.add_argument("--version", action="version", version=f"mom_events {__version__}")
    args = parser.parse_args(argv)
    if args.exec_timeout is not None and args.command is None:
        parser.error("--exec-timeout needs --exec")
    if args.upcoming is not None and not args.check:
        parser.error("--next goes with --check")
    if args.channel is not None and not args.prompt:
        parser.error("--channel goes with --prompt")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[stderr])
    if isinstance(sys.stdout, io.TextIOWrapper):  # it is, unless replaced by an embedding program
        sys.stdout.reconfigure(errors="backslashreplace")  # file names need not be valid UTF-8
    if args.prompt:
        history = os.path.abspath(args.history) if args.history else None
        sys.stdout.write(events_prompt(os.path.abspath(args.dir), args.timezone, args.channel, history))
        return 0
    if args.check:
        return _check(args.dir, args.history, args.timezone, args.upcoming)
    status = _serve(args)
    log.info("stopped, exit status %d", status)  # the operator sees the end
    return status


def _serve(args: argparse.Namespace) -> int:
    """Watch until SIGTERM or SIGINT, then shut down within the grace period."""
    stop = threading.Event()
    halted: list[str] = []
    commands = _Commands(args.command, args.exec_timeout) if args.command else None

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():  # the second signal: leave now, and leave nothing of any run behind
            if commands is not None:
                commands.kill_all()
            log.warning("stopped at once on a second signal, exit status %d", 128 + signum)
            os._exit(128 + signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)

    printer = _printer(args.json)

    def handler(event: Event) -> None:
        printer(event)
        if commands is not None:
            commands(event)

    def on_halt(reason: str) -> None:
        halted.append(reason)
        stop.set()

    watcher = EventsWatcher(args.dir, handler, on_error=_report, poll_interval=args.poll, history=args.history,
                            misfire_grace=args.misfire_grace, on_halt=on_halt, standby=args.standby,
                            notify=args.notify, systemd=True, timezone=args.timezone)
    try:
        watcher.start()
    except EventError as exc:
        log.error("%s", exc)
        return 2
    except OSError as exc:
        log.error("cannot watch %s: %s", args.dir, exc.strerror or exc)
        return 2
    if watcher.active:
        log.info("watching %s (%d events scheduled)", os.path.abspath(args.dir), watcher.scheduled_count())

    def shut_down() -> int:
        if not halted:
            log.info("stopping; running events have %g s to finish", args.grace)
        still_running = watcher.stop(timeout=args.grace)
        if still_running:
            log.warning("grace period over; stopping what still runs on channels %s", ", ".join(still_running))
            if commands is not None:
                commands.stop_all()
                watcher.stop(timeout=_KILL_AFTER + _KILL_WAIT + 1)
                commands.kill_all()  # a supervisor late even for that: nothing of a run outlives the harness
        return 2 if halted else 1 if still_running else 0

    while not stop.wait(_SIGNAL_TICK):
        pass
    return _with_signals_handled(shut_down)


def _with_signals_handled(fn: Callable[[], int]) -> int:
    """``fn()`` on a thread of its own, the main thread waking every
    _SIGNAL_TICK meanwhile.  The kernel may give a signal to any thread, and
    Python runs its handler only when the main thread next runs Python code:
    blocked in a lock for the grace period, or for good in ``stop.wait()``, it
    would leave SIGTERM unheard (seen under load, 1 start in 15)."""
    outcome: list[int | BaseException] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name="mom_events-shutdown", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(_SIGNAL_TICK)
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


if __name__ == "__main__":
    sys.exit(main())
