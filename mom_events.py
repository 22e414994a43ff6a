# SPDX-License-Identifier: MIT
# Copyright (c) the mom_events authors
# The one module of the mom_events project (see its README), meant to be copied into a bot as it is.
"""mom_events: a directory of JSON files becomes scheduled wake-ups for an agent.

An agent schedules its own future work by writing a file into the events directory; the watcher calls the
bot's handler when it is due::

    {"type": "one-shot", "channelId": "C123", "text": "Remind Mario", "at": "2025-12-15T09:00:00+01:00"}
    -> handler(Event(...)), whose .message is
       "[EVENT:dentist.json:one-shot:2025-12-15T09:00:00+01:00] (due 2025-12-15T09:00:00+01:00) Remind Mario"

The module reads top to bottom: data model and parsing, cron, timing and the judge, directory scanning,
the schedule (a heap of due times), the channel queues, the history, the files and their runs, the
watcher that joins them, the CLI.  Only croniter is needed beyond the standard library, and only for
periodic events; it is imported when the first one is parsed.
"""

from __future__ import annotations

import logging
import sys

if sys.platform == "win32":  # fcntl, /bin/sh, sessions
    raise ImportError("mom_events needs a POSIX system (fcntl, /bin/sh, sessions); it does not run on Windows")

import argparse
import bisect
import calendar
import contextlib
import enum
import errno
import fcntl
import heapq
import importlib
import inspect
import io
import itertools
import json
import math
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import threading
import time
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Event", "EventError", "EventsWatcher", "events_prompt", "next_fire", "parse_event"]
__version__ = "0.3.0"

log = logging.getLogger("mom_events")

TYPES = ("immediate", "one-shot", "periodic")
NOTICES = ("rejected", "missed", "interrupted", "skipped", "discarded", "stale")  # what the agent is told
MAX_FILE_BYTES = 1 << 20  # a bigger file is no event: a mistake, or an attempt on memory


# --- Data model and parsing: an event file's JSON, checked field by field, as an Event ---


class EventError(ValueError):
    """A bad event file; ``str()`` is one line, ``NAME: reason``, fit for a log and for the agent."""

    def __init__(self, filename: str | None, reason: str) -> None:
        reason = reason if len(reason) <= 300 else reason[:300] + "…"  # every quote is clipped; this is the backstop
        super().__init__(f"{filename}: {reason}" if filename else reason)
        self.filename, self.reason = filename, reason


class _NeedsCroniter(EventError):
    """A valid periodic file on a machine without croniter: keep the file, it is not the writer's mistake."""


@dataclass(frozen=True, slots=True)
class Event:
    """An event file, or a notice about one (see NOTICES), its fields as written."""

    filename: str
    type: str
    channel_id: str
    text: str
    at: str | None = None
    schedule: str | tuple[str, ...] | None = None  # a cron expression, or a list of them
    timezone: str | None = None
    every: str | None = None  # an interval, "90m"
    start: str | None = None
    until: str | None = None
    catch_up: bool | str = False  # or how long a missed run stays worth running, in every's syntax ("1d")
    due: datetime | None = None
    late: float | None = None
    run_id: str | None = None  # this run's id (MOM_EVENT_RUN for a command); None outside a watcher's run

    @property
    def message(self) -> str:
        """What the agent is woken with: ``[EVENT:build.json:periodic:every 90m] (due ..., late by ...) text``."""
        tag = _when(self)
        head = f"[EVENT:{self.filename}:{self.type}" + ("]" if tag is None else f":{tag}]")
        notes = [] if self.due is None or self.type not in TYPES else [f"due {self.due.isoformat(timespec='seconds')}"]
        notes += [] if self.late is None else [f"late by {_duration(self.late)}"]
        return f"{head} ({', '.join(notes)}) {self.text}" if notes else f"{head} {self.text}"


def _when(event: Event) -> str | None:
    """When an event runs, as its tag says: its ``at``, its crons (a list joined by " | "), or ``every 90m``."""
    crons = [event.schedule] if isinstance(event.schedule, str) else event.schedule or [f"every {event.every}"]
    return {"one-shot": event.at, "periodic": " | ".join(crons)}.get(event.type)


_FIELDS = {"immediate": ("type", "channelId", "text"), "one-shot": ("type", "channelId", "text", "at", "timezone"),
           "periodic": ("type", "channelId", "text", "schedule", "timezone", "every", "start", "until", "catchUp")}
_KNOWN = sorted({key for fields in _FIELDS.values() for key in fields})  # any other key is a bot's own, ignored
_MAX_LENGTH = {"channelId": 255, "schedule": 1000, "timezone": 64}  # what a real one needs, and some
_ALLOWED = {"schedule": "a string or a list of at most 20 strings", "catchUp": 'true, false or a duration such as "1d"'}
_JSON_KIND = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
_BLANKS = frozenset("\u115f\u1160\u2800\u3164\uffa0")  # print as blanks, though Python calls them printable
_INTERVAL = re.compile(r"(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_UNITS = (("day", 86400, 1 << 62), ("hour", 3600, 24), ("minute", 60, 60), ("second", 1, 60))  # name, size, per
_DATES = (date(1, 1, 3), date(9999, 12, 29))  # within a day of datetime's range, any offset would overflow it
_T = TypeVar("_T")


def parse_event(data: str | bytes, filename: str) -> Event:
    """Parse and check one event file's content; anything wrong raises EventError naming the file."""
    if len(filename) > 255 or "/" in filename or not _is_event_name(filename):
        raise EventError(_excerpt(filename), 'not an event file name (NAME.json, no "/" or leading ".", 255 at most)')
    return _parse(data, filename)[0]


def _parse(data: str | bytes, filename: str) -> tuple[Event, _Timing | _Interval | None, list[str]]:
    """parse_event for any name (--check reads x.json.rejected), with its timing's parts and the keys it ignored."""
    try:
        if len(data) > MAX_FILE_BYTES:  # a careless or hostile writer's megabyte
            raise ValueError("file is larger than 1 MiB")
        try:
            text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
            obj = json.loads(text.removeprefix("\ufeff"), parse_constant=_finite, parse_float=_finite)
        except UnicodeDecodeError as exc:
            raise ValueError(f"not valid UTF-8 (byte {exc.start})") from None
        except RecursionError:
            raise ValueError("invalid JSON: nested too deeply") from None
        except ValueError as exc:  # a syntax error, NaN, Infinity, 1e999, a 5,000-digit integer
            raise ValueError(f"invalid JSON: {str(exc).split(';')[0]}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, not {_JSON_KIND.get(type(obj), 'null')}")
        return *_event(obj, filename), [key for key in obj if key not in _KNOWN]
    except _CronMissing:
        raise _NeedsCroniter(filename, "periodic events with a schedule need croniter (pip install croniter)") from None
    except ValueError as exc:  # every reason below is a plain ValueError, given its file's name here
        raise EventError(filename, str(exc)) from None


def _finite(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _event(obj: dict[str, object], filename: str) -> tuple[Event, _Timing | _Interval | None]:
    """The checked Event: keys first (a misspelt one explains what follows), then the values, the timing last."""
    if "for" in obj:
        raise ValueError('"for" is no longer supported: list several schedules in "schedule" instead')
    fields = _FIELDS.get(written) if isinstance(written := obj.get("type"), str) else None
    for key in obj:
        typed = key.lower().replace("_", "").replace("-", "")
        near = [key] if key in _KNOWN else [  # a known key is itself, and is not compared with all others
            name for name in _KNOWN if typed == name.lower() or len(name) >= 5 and _one_edit(typed, name.lower())]
        meant = min(near, key=lambda name: typed != name.lower(), default=None)
        owners = " and ".join(t for t in TYPES if meant in _FIELDS[t])
        if meant not in (key, None):
            whose = "" if fields is None or meant in fields else f' ("{meant}" is for {owners} events)'
            raise ValueError(f"unknown field {json.dumps(_excerpt(key), ensure_ascii=False)}: did you mean "
                             f'"{meant}"?{whose}')
        if meant and fields and key not in fields:
            raise ValueError(f'"{key}" is for {owners} events, not {written} ones')
    if (kind := _field(obj, "type", required=True)) not in _FIELDS:
        raise ValueError(f'unknown type {_excerpt(kind)!r} (expected "immediate", "one-shot" or "periodic")')
    channel = _field(obj, "channelId", required=True)
    if fault := _channel_fault(channel):
        raise ValueError(f"\"channelId\" {_excerpt(channel)!r} {fault} (a chat platform's channel ID has none)")
    given: Callable[[str], str | None] = lambda key: _field(obj, key) or None
    event = Event(filename, kind, channel, _field(obj, "text", required=True), at=given("at"), until=given("until"),
                  schedule=_schedule(obj), timezone=given("timezone"), every=given("every"), start=given("start"),
                  catch_up=flag if isinstance(flag := obj.get("catchUp", False), bool) else _field(obj, "catchUp"))
    make = {"one-shot": _at, "periodic": _periodic}.get(kind)  # the timing, last: it may need croniter
    return event, make and make(event, None if event.timezone is None else _zone(event.timezone))


def _channel_fault(channel: str) -> str | None:
    """Why ``channel`` is no chat platform's channel ID (whitespace, or a character that does not print), or None."""
    unseen = (c for c in channel if c.isspace() or not c.isprintable() or c in _BLANKS
              or unicodedata.category(c) in ("Mn", "Me"))  # a combining mark shows on the letter before it
    if (bad := next(unseen, None)) is None:
        return None
    return "contains whitespace" if bad.isspace() else f"contains U+{ord(bad):04X}, which does not print"


def _one_edit(a: str, b: str) -> bool:
    """Is ``a`` one letter changed, dropped or added, or two adjacent ones swapped, away from ``b``?"""
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    swapped = a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:]
    return a != b and (a[i + 1:] in (b[i + 1:], b[i:]) or a[i:] == b[i + 1:] or swapped)


def _field(obj: dict[str, object], key: str, required: bool = False) -> str:
    """A string field's value ("" when the file has none), not blank and within its limit."""
    if key not in obj and required:
        raise ValueError(f'missing field "{key}"')
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f'"{key}" must be {_ALLOWED.get(key, "a string")}, not {_JSON_KIND.get(type(value), "null")}')
    if key in obj and not value.strip():
        raise ValueError(f'"{key}" is empty')
    if len(value) > (limit := _MAX_LENGTH.get(key, len(value))):
        raise ValueError(f'"{key}" is {len(value)} characters long (at most {limit})')
    return value if key == "text" else sys.intern(value)  # the files on one schedule share one copy of it


def _schedule(obj: dict[str, object]) -> str | tuple[str, ...] | None:
    """One cron expression, or a list of at most 20 (a tuple), within a string field's limits all together."""
    value = obj.get("schedule")
    texts = [cron for cron in (value if isinstance(value, list) else [value]) if isinstance(cron, str)]
    if any("|" in text for text in texts):  # several are a list
        raise ValueError('"schedule" is one cron expression: list several as ["0 9 * * 1-5", "0 10 * * 0,6"]')
    if not isinstance(value, list) or len(texts) < len(value):  # one expression, or a list not of strings
        return _field(obj, "schedule") or None
    if len(texts) > 20:
        raise ValueError(f'"schedule" lists {len(texts)} expressions (at most 20)')
    _field({"schedule": " | ".join(texts)}, "schedule")  # not blank, not too long
    return tuple(map(sys.intern, texts))


def _periodic(event: Event, own: ZoneInfo | None) -> _Timing | _Interval:
    """A periodic event's timing, checked: a cron's, or an interval's as far as its file says (see _Every)."""
    schedule, every = event.schedule, event.every
    if (schedule is None) == (every is None):
        raise ValueError('give "schedule" (cron, with "timezone") or "every" (an interval such as "90m"), not both')
    if schedule is not None and own is None:  # a cron needs its zone; an interval may have one (see _Every)
        raise ValueError('missing field "timezone" (an IANA name such as Europe/Vienna)')
    step = 0 if every is None else _keyed("every", _seconds, every)
    instant = lambda text: _instant(text, own)
    start, given = (-math.inf, None) if event.start is None else _keyed("start", instant, event.start)
    if (until := math.inf if event.until is None else _keyed("until", instant, event.until)[0]) < start:
        raise ValueError(f'"until" {event.until!r} is before "start" {event.start!r}')
    reach = _catch_up(event)
    if schedule is not None and own is not None:  # its reasons name the schedule: "bad schedule '0 9 * *': ..."
        cron = _cron((schedule,) if isinstance(schedule, str) else schedule, own.key)
        return _OnCron(own, start, until, reach, cron=cron)
    days = re.search("[1-9][0-9]*[hms]", every or "") is None  # whole weeks and days: no hours, minutes, seconds
    wall = given if given and not given.tzinfo else None  # a wall time is kept, skipped or not
    return _Interval(step, days, own, start, until, wall, reach)


def _keyed(key: str, read: Callable[[str], _T], value: str) -> _T:
    try:
        return read(value)
    except ValueError as exc:
        raise ValueError(f'"{key}" {exc}') from None


def _excerpt(text: str, limit: int = 40) -> str:
    """An error line quotes what was wrong, never a megabyte of it."""
    return text if len(text) <= limit else text[:limit] + "…"


def _duration(seconds: float) -> str:
    """Exact to the second, every unit in words: 36 hours read back as "1 day" would mislead."""
    words = [f"{n} {unit}{'s' if n > 1 else ''}" for unit, size, per in _UNITS if (n := int(seconds) // size % per)]
    return " ".join(words) or "less than a second"


def _seconds(text: str) -> int:
    if len(text) > 40 or (parts := _INTERVAL.fullmatch(text)) is None:
        raise ValueError(f"{_excerpt(text)!r} is not an interval such as 90m, 1h30m, 2d or 6w (w, d, h, m, s in that "
                         "order)")
    sizes = (7 * 86400, *(size for _, size, _ in _UNITS))  # weeks are read, never printed (see _duration)
    total = sum(int(count) * size for count, size in zip(parts.groups(), sizes, strict=True) if count)
    if not 1 <= total <= 3650 * 86400:
        raise ValueError(f"{_excerpt(text)!r} is not between 1 second and ten years")
    return total


def _catch_up(event: Event) -> float | None:
    """How late a missed run is still run: None not at all, math.inf however late, else within so many seconds."""
    return float(_keyed("catchUp", _seconds, c)) if isinstance(c := event.catch_up, str) else math.inf if c else None


def _read_iso(text: str) -> datetime:
    """An ISO 8601 date-time, naive or aware, whose instant every zone can show; ValueError why not."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"is not an ISO 8601 date-time: {_excerpt(text)!r}") from None
    if not _DATES[0] <= when.date() <= _DATES[1]:
        raise ValueError(f"is out of range: {_excerpt(text)!r}")
    return when


def _instant(text: str, zone: ZoneInfo | None = None) -> tuple[float, datetime]:
    """An instant with its offset (as written: unlike "at", not checked against ``zone``), or wall time in ``zone``;
    and the date-time as written."""
    if (when := _read_iso(text)).utcoffset() is None:  # as the host's local time, it would vary with the host
        if zone is None:
            raise ValueError(f'has no UTC offset: {_excerpt(text)!r} (add one, e.g. +01:00, or give "timezone")')
        return _wall(when, zone)[0], when
    return when.timestamp(), when


def _at(event: Event, own: ZoneInfo | None) -> _Once:
    """A one-shot's timing: its instant, and what daylight saving did to its wall time; ValueError why not."""
    at, name = event.at, event.timezone
    if at is None:
        raise ValueError('missing field "at" (ISO 8601 with an offset, such as 2027-12-15T09:00:00+01:00)')
    if (when := _keyed("at", _read_iso, at)).utcoffset() is None:
        if own is None:
            raise ValueError(f'"at" has no UTC offset: {_excerpt(at)!r} (add one, e.g. +01:00, or give "timezone")')
        instant, note = _wall(when, own)
        return _Once(own, at=instant, note=note)
    if own is not None and (there := when.astimezone(own)).utcoffset() != when.utcoffset():
        offsets = (when.isoformat(timespec="seconds")[19:], there.isoformat(timespec="seconds")[19:])
        raise ValueError(f'"at" {at!r} has offset {offsets[0]}, but {name} is at {offsets[1]} then')
    return _Once(own or when.tzinfo or UTC, at=when.timestamp(), note=None)


def _wall(naive: datetime, zone: ZoneInfo) -> tuple[float, str | None]:
    """A wall time as cron(8) reads it (a skipped one when the gap ends, a repeated one on its first pass), said."""
    t0, t1 = (naive.replace(tzinfo=zone, fold=fold).timestamp() for fold in (0, 1))
    clock = naive.strftime("%H:%M:%S" if naive.second else "%H:%M")
    if t0 <= t1:  # ordinary, or repeated: fold 0 is the first pass
        note = f"{clock} happens twice on {naive.date()} in {zone.key}: runs at the first"
        return t0, f"{note} ({naive.replace(tzinfo=zone).tzname()})" if t0 < t1 else None
    hi = _offset_change(zone, t1, t0)  # skipped: the clocks jumped in (t1, t0]
    end, before = datetime.fromtimestamp(hi, zone), naive - timedelta(seconds=t0 - hi)
    return float(hi), (f"{clock} does not exist on {naive.date()} in {zone.key} (clocks go from {before:%H:%M} to "
                       f"{end:%H:%M}): runs at {end:%H:%M} {end.tzname()}")


def _zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (ZoneInfo keeps one of each); ValueError if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown timezone {_excerpt(name)!r} (expected an IANA name such as Europe/Vienna)") from None


# --- Cron: the fields, croner's day forms, cron(8)'s day rule and its daylight saving rule ---

_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MISPLACED = {"#": "'#' belongs in day-of-week", "W": "'W' belongs in day-of-month",
              "L": "'L' belongs in day-of-month or day-of-week"}
_US = timedelta(microseconds=1)
_FIRST_RUN = datetime(1, 1, 2, tzinfo=UTC).timestamp()  # datetime's range, with a day to spare for offsets
_LAST_RUN = datetime(9999, 12, 30, tzinfo=UTC).timestamp()


class _CronMissing(ImportError):
    """croniter is not installed: a valid periodic file waits for it rather than being rejected."""


def _ascii_int(text: str) -> int | None:
    """A number in ASCII digits, else None; a long one is read as far as needed (int() refuses 4,300 digits)."""
    if not (text.isdigit() and text.isascii()):
        return None
    return min(int(text.lstrip("0")[:10] or "0"), 10**9)


class _Field(NamedTuple):
    """One cron field: its bounds, its names, and how many values it has (the largest sensible step)."""

    name: str
    low: int
    high: int
    size: int
    names: dict[str, int] = {}

    def value(self, text: str) -> int:
        if text.lower() in self.names:
            return self.names[text.lower()]
        if (value := _ascii_int(text)) is None:
            mark = "#" if "#" in text else text[-1:].upper()
            hint = f" ({_MISPLACED[mark]})" if mark in _MISPLACED else ""
            raise ValueError(f"{_excerpt(text)!r} is not a valid {self.name} value{hint}")
        if not self.low <= value <= self.high:
            raise ValueError(f"{self.name} {_excerpt(text, 12)} is out of range {self.low}-{self.high}")
        return value

    def values(self, item: str) -> range | set[int]:
        """One plain list item's values: a number or name, a range, a step, or ``*`` (``?`` is the same)."""
        body, slash, step_text = item.partition("/")
        step = _ascii_int(step_text) if slash else 1
        if not step:
            raise ValueError(f"{_excerpt(item)!r}: the step must be a positive whole number")
        if step > self.size:
            raise ValueError(f"{_excerpt(item)!r}: step {_excerpt(step_text, 12)} is larger than the {self.name} field")
        if body in ("*", "?"):
            low, high = (0 if self.name == "year" and slash else self.low), self.high  # croner: */2 = even years
        elif "-" in body:
            first, _, last = body.partition("-")
            low, high = self.value(first), self.value(last)
            if self.name == "day-of-week" and high == 0 < low:  # "fri-sun" ends on Sunday, 7
                high = 7
            if low > high:
                raise ValueError(f"{_excerpt(item)!r}: wrapping ranges are not supported "
                                 f"(split it: {first}-{self.high},{self.low}-{last})")
        else:
            low = self.value(body)
            high = self.high if slash else low  # "a/n" runs to the field's end: Sunday, 7, in day-of-week
        values = range(low, high + 1, step)
        return {day % 7 for day in values} if self.name == "day-of-week" else values

    def parse(self, text: str) -> set[int]:
        return set[int]().union(*(self.values(item) for item in text.split(",")))

    def for_croniter(self, text: str) -> str:  # as croniter reads it right, and quickly
        values = self.parse(text)
        return "*" if len(values) == self.size else ",".join(map(str, sorted(values)))


_SECOND = _Field("second", 0, 59, 60)
_MINUTE = _Field("minute", 0, 59, 60)
_HOUR = _Field("hour", 0, 23, 24)
_DOM = _Field("day-of-month", 1, 31, 31)
_MONTH = _Field("month", 1, 12, 12, {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec"
                                                                 .split(), 1)})
_DOW = _Field("day-of-week", 0, 7, 7, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())})
_YEAR = _Field("year", 1, 9999, 9999)  # croner's range, and datetime's


class _Pattern:
    """One cron expression.  A *wildcard* job (minute or hour starts with ``*`` or ``?``) runs at the real
    instants that match; any other runs a skipped time at the gap's end, a repeated one on its first pass."""

    def __init__(self, text: str) -> None:
        text = _MACROS.get(text.strip().lower(), text)
        if text.lstrip().startswith("@"):
            raise ValueError(f"unknown macro {_excerpt(text.strip())!r} (expected one of {', '.join(sorted(_MACROS))})")
        fields = text.split()
        if not 5 <= len(fields) <= 7:
            raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), "
                             f"6 (seconds first) or 7 (seconds first, year last), found {len(fields)}")
        fields = (["0"] if len(fields) == 5 else []) + fields + (["*"] if len(fields) < 7 else [])
        if any("" in field.split(",") for field in fields):
            raise ValueError("empty list item")
        second, minute, hour, dom, month, dow, year = fields
        self.times = f"{_SECOND.for_croniter(second)} {_MINUTE.for_croniter(minute)} {_HOUR.for_croniter(hour)} * * *"
        self.months = sorted(_MONTH.parse(month))
        # None for every year; else ranges, not a set that could hold 9,999 years
        self.years = None if year in ("*", "?") else [_YEAR.values(item) for item in year.split(",")]
        self.wildcard = minute.startswith(("*", "?")) or hour.startswith(("*", "?"))
        self.clock: Any = None  # a croniter (it ships no types) for the time of day, set by _Cron
        self._lock = threading.Lock()  # a croniter keeps state between calls, and a _Pattern is shared
        # the day fields, matched as cron(8) and croner do (docs/rules.md, "Day matching")
        both, dow = dow.startswith("+"), dow.removeprefix("+")
        if both and not dow:
            raise ValueError("'+' must be followed by the day-of-week, as in +MON")
        self.day_or_weekday = not both and not dom.startswith(("*", "?")) and not dow.startswith(("*", "?"))
        self.dates: set[int] = set()
        self.nearest_weekday: set[int] = set()  # nW; in both, 0 stands for the month's last day (L, LW)
        for item in dom.split(","):
            if item.upper() in ("L", "LW"):
                (self.dates if item.upper() == "L" else self.nearest_weekday).add(0)
            elif item.upper().endswith("W") and _ascii_int(item[:-1]) is None:
                raise ValueError(f"{_excerpt(item)!r}: 'W' follows a single day, as in 15W")
            elif item.upper().endswith("W"):
                self.nearest_weekday.add(_DOM.value(item[:-1]))
            elif item.upper().endswith("L"):
                raise ValueError(f"{_excerpt(item)!r}: in day-of-month 'L' stands alone (the last day) or as LW")
            else:
                self.dates.update(_DOM.values(item))
        self.nth: set[tuple[int, int]] = set()  # (weekday, k): the k-th in its month, 1-5, or 0 for the last
        for item in dow.split(","):
            days, sharp, k = item.partition("#")
            if not sharp and not item.upper().endswith("L"):  # every one in the month
                self.nth |= {(day, n) for day in _DOW.values(item) for n in range(1, 6)}
                continue
            days, k = (days, k) if sharp else (item[:-1], "L")
            if not days:
                raise ValueError(f"{_excerpt(item)!r}: a day comes first, as in FRI#2, FRI#L or 5L")
            if k.upper() != "L" and _ascii_int(k) not in range(1, 6):
                raise ValueError(f"{_excerpt(item)!r}: the number after '#' must be 1 to 5")
            self.nth |= {(day, 0 if k.upper() == "L" else int(k)) for day in _DOW.values(days)}
        self._by_shape: dict[tuple[int, int], tuple[int, ...]] = {}

    def in_month(self, year: int, month: int) -> tuple[int, ...]:
        """A month's matching days, kept by its shape (the weekday of its 1st, its length): 14 shapes in all."""
        monday_first, length = shape = calendar.monthrange(year, month)
        if (found := self._by_shape.get(shape)) is None:  # two threads may both compute it: the same tuple
            weekday = {day: (monday_first + day) % 7 for day in range(1, length + 1)}  # cron's numbering: Sunday 0
            workdays = [day for day, name in weekday.items() if 1 <= name <= 5]
            dates = {day or length for day in self.dates}
            dates |= {min(workdays, key=lambda w: abs(w - (n or length))) for n in self.nearest_weekday if n <= length}
            by_weekday = {day for day, name in weekday.items()
                          if (name, (day + 6) // 7) in self.nth or (day + 7 > length and (name, 0) in self.nth)}
            days = (dates | by_weekday) if self.day_or_weekday else (dates & by_weekday)
            self._by_shape[shape] = found = tuple(sorted(day for day in days if day <= length))
        return found

    def match_after(self, wall: datetime) -> datetime | None:
        for day in self._days_from(wall.date()):
            start = wall if day == wall.date() else datetime(day.year, day.month, day.day) - timedelta(seconds=1)
            try:
                with self._lock:
                    found: datetime = self.clock.get_next(datetime, start_time=start)
            except (ValueError, OverflowError):  # past the year 9999
                return None
            if found.date() == day:
                return found
        return None

    def _days_from(self, first: date) -> Iterator[date]:
        """The matching days from ``first`` on, to the year 9999 (one that never fires: 8,000 cheap years)."""
        for year in range(first.year, _YEAR.high + 1):
            if self.years is None or any(year in r for r in self.years):
                for month in self.months:
                    yield from (date(year, month, day) for day in self.in_month(year, month)
                                if (year, month, day) >= (first.year, first.month, first.day))

    def next_after(self, zone: ZoneInfo, t: int) -> float | None:
        """The first run strictly after the whole second ``t``, by the daylight saving rule (see the class)."""
        local = datetime.fromtimestamp(t, zone)
        wall = local.replace(tzinfo=None)
        span = wall.replace(tzinfo=zone, fold=1).timestamp() - wall.replace(tzinfo=zone, fold=0).timestamp()
        if not span:
            return self._first_pass(zone, wall, t)
        # in a repeated hour, walls [a, b): from its second pass the first passes are over; a wildcard runs both
        a = datetime.fromtimestamp(_offset_change(zone, t - span, t + span), zone).replace(tzinfo=None)
        b = a + timedelta(seconds=span)
        first, second = (b - _US, wall) if local.fold else (wall, a - _US)
        best = self._first_pass(zone, first, t)
        again = self.match_after(second) if self.wildcard else None
        if again is None or again >= b:
            return best
        repeat = again.replace(tzinfo=zone, fold=1).timestamp()
        return repeat if best is None else min(best, repeat)

    def _first_pass(self, zone: ZoneInfo, wall: datetime, t: float) -> float | None:
        """The first run after ``t`` from ``wall`` on: a repeated wall's first pass, a skipped one's gap end."""
        while (found := self.match_after(wall)) is not None:
            run = _wall(found, zone)[0]
            shown = datetime.fromtimestamp(run, zone).replace(tzinfo=None)  # found, unless it was skipped
            if run > t and (shown == found or not self.wildcard):
                return run
            wall = max(found, shown - _US)
        return None

    def note(self, zone: ZoneInfo, low: datetime, high: datetime, gap: bool) -> str | None:
        """What daylight saving does to this pattern on the night walls [low, high) are skipped or repeated."""
        wall = self.match_after(low - _US)
        if wall is None or wall >= high:
            return None
        if not self.wildcard:  # a one-shot's words for that wall time (see _wall), for that day
            return (_wall(wall, zone)[1] or "").replace(": runs at", ": that day it runs at")
        if gap:
            return (f"on {low.date()} clocks go from {low:%H:%M} to {high:%H:%M} in {zone.key}: "
                    f"it does not run in between")
        first, second = (low.replace(tzinfo=zone, fold=fold).tzname() for fold in (0, 1))
        return (f"{low:%H:%M} to {high:%H:%M} happen twice on {low.date()} in {zone.key}: it runs in both passes "
                f"({first}, then {second})")


def _offset_change(zone: ZoneInfo, low: float, high: float) -> int:
    """The instant of the one offset change in (low, high], to the second, by bisection."""
    target = datetime.fromtimestamp(high, zone).utcoffset()
    seconds = range(math.floor(low) + 1, math.ceil(high) + 1)
    changed = lambda t: datetime.fromtimestamp(t, zone).utcoffset() == target
    return seconds[bisect.bisect_left(seconds, True, key=changed)]


@lru_cache(maxsize=64)
def _transitions(zone: ZoneInfo, day: int) -> tuple[int, ...]:
    """When the zone's clocks change in the 367 days from ``day`` (days since 1970), to the second."""
    offsets = [(later, datetime.fromtimestamp(later * 86400, zone).utcoffset())
               for later in range(day, min(day + 368, int(_LAST_RUN // 86400)))]
    return tuple(_offset_change(zone, later * 86400, (later + 1) * 86400)
                 for (later, before), (_, after) in itertools.pairwise(offsets) if before != after)


class _Cron:
    """A schedule in its zone, checked once: the union of its patterns' runs (each pass its own)."""

    def __init__(self, schedule: tuple[str, ...], timezone: str) -> None:
        self.zone = _zone(timezone)
        if (length := sum(map(len, schedule))) > 1000:  # the cache holds what it is given: a megabyte of spaces?
            raise ValueError(f"the schedule is {length} characters long (at most 1000)")
        self.patterns: list[_Pattern] = []
        for text in schedule:
            try:
                self.patterns.append(_Pattern(text))
            except ValueError as exc:
                raise ValueError(f"bad schedule {_excerpt(text)!r}: {exc}") from None
        try:
            croniter = importlib.import_module("croniter").croniter
        except ImportError:
            raise _CronMissing("periodic events need croniter (pip install croniter)") from None
        # croniter: the time of day; the module: days, months, years (cron(8)'s day rule, croner's L W #, any year)
        for text, pattern in zip(schedule, self.patterns, strict=True):
            pattern.clock = croniter(pattern.times, datetime(2001, 1, 1), second_at_beginning=True)
            if pattern.match_after(datetime(2001, 1, 1)) is None:
                raise ValueError(f"bad schedule {_excerpt(text)!r}: it never fires")

    def next_after(self, t: float) -> float | None:
        return None if t >= _LAST_RUN else _next_run(self, math.floor(max(t, _FIRST_RUN)))  # runs fall on whole seconds

    def notes(self, now: float, until: float = math.inf) -> list[str]:
        """What the zone's next clock changes (up to ``until``) do to the runs, said aloud once each (--check)."""
        said: list[str] = []  # of the next spring-forward and fall-back (or one, in a zone that changes once):
        for change in [c for c in _transitions(self.zone, math.floor(now / 86400)) if now < c <= until][:2]:
            before = datetime.fromtimestamp(change - 1, self.zone).replace(tzinfo=None) + timedelta(seconds=1)
            after = datetime.fromtimestamp(change, self.zone).replace(tzinfo=None)
            low, high = sorted((before, after))  # the walls skipped, or repeated
            notes = [pattern.note(self.zone, low, high, after > before) for pattern in self.patterns]
            said += [note for note in dict.fromkeys(notes) if note and note not in said]
        return said


_cron = lru_cache(maxsize=256)(_Cron)  # checked once; a failure (ValueError, _CronMissing) is not cached


@lru_cache(maxsize=64)
def _next_run(cron: _Cron, second: int) -> float | None:
    """The first run after the whole ``second``; cached, for the files judged at one instant share the answer."""
    return min((r for p in cron.patterns if (r := p.next_after(cron.zone, second)) is not None), default=None)


def next_fire(schedule: str | Iterable[str], timezone: str, after: datetime) -> datetime:
    """The first run of ``schedule`` (or of a list: their union) in ``timezone`` strictly after the aware ``after``;
    ValueError if none."""
    if after.utcoffset() is None:
        raise ValueError("next_fire needs an aware datetime for 'after'")
    cron = _cron(crons := (schedule,) if isinstance(schedule, str) else tuple(schedule), timezone)
    if (run := cron.next_after(after.timestamp())) is None:
        raise ValueError(f"{_excerpt(' | '.join(crons))!r} has no run after {after.isoformat()}")
    return datetime.fromtimestamp(run, cron.zone)


# --- Timing and the judge: when a file's occurrences fall, and what becomes of a file now ---

# A harness's last sign of life is the lock file's mtime, set every _BEAT and before anything fires; what fell
# due up to _TAKEOVER seconds after it runs late at the next start (a standby needs a moment to take over).
# _COARSE: a file's mtime may be stamped this much before its write.
_BEAT = 1.0
_TAKEOVER = 5.0
_COARSE = 2.0


@dataclass(slots=True)  # one a file: memory grows with the files, not with their fields
class _Timing:
    """When a scheduled event's occurrences fall, bounded by its ``start`` and ``until``."""

    zone: tzinfo  # in which an occurrence's due time is shown
    start: float = -math.inf
    until: float = math.inf
    catch_up: float | None = None  # a periodic's: how late a missed run still runs (see _catch_up)

    def next_after(self, t: float) -> float | None:
        """The first occurrence strictly after ``t``, or None when none is left."""
        due = self._next(t if t >= self.start else math.nextafter(self.start, -math.inf))  # far on, 1e-6 is no step
        return due if due is not None and due <= self.until else None

    def _next(self, t: float) -> float | None:
        raise NotImplementedError

    def notes(self, now: float) -> list[str]:
        """What daylight saving does to the coming occurrences, in words."""
        return []


@dataclass(slots=True, kw_only=True)
class _Once(_Timing):
    at: float
    note: str | None

    def _next(self, t: float) -> float | None:
        return self.at if self.at > t else None

    def notes(self, now: float) -> list[str]:
        return [self.note] if self.note and self.at > now else []


@dataclass(slots=True, kw_only=True)
class _OnCron(_Timing):
    cron: _Cron

    def _next(self, t: float) -> float | None:
        return self.cron.next_after(t)

    def notes(self, now: float) -> list[str]:
        return self.cron.notes(max(now, self.start), self.until)


class _Interval(NamedTuple):
    """An ``every`` as its file says it: ``step`` seconds, ``days`` if whole days and weeks, ``wall``: a
    ``start`` written as wall time in the ``own`` zone."""

    step: int
    days: bool
    own: ZoneInfo | None
    start: float
    until: float
    wall: datetime | None
    catch_up: float | None


@dataclass(slots=True, kw_only=True)
class _Every(_Timing):
    """Every so long from ``start``, else from the file's mtime (now, if ahead) floored to the second (the first
    run one interval later): a restart keeps the phase, and an ``until`` written as "now + 3 minutes" its last run.
    With a ``timezone`` (``wall``: the origin's wall time there), whole days and weeks keep the wall time: run k
    is ``wall`` plus k intervals, read as cron reads a wall time, so a gap never shifts the runs after it."""

    step: int
    days: bool
    origin: float
    first: int
    wall: datetime | None

    def _next(self, t: float) -> float | None:
        k = max(self.first, math.floor((t - self.origin) / self.step) + 1)
        if self.wall is None or not self.days:
            return self.origin + self.step * k
        while k > self.first and self._run(k - 1) > t:  # the clocks move a run by hours, never by a day
            k -= 1
        while (due := self._run(k)) <= t:
            k += 1
        return due if due < math.inf else None

    def _run(self, k: int) -> float:
        """Run k of a calendar interval (math.inf past what every zone can show)."""
        if not k or self.wall is None or not isinstance(self.zone, ZoneInfo):
            return self.origin
        days = self.step // 86400 * k
        return math.inf if self.wall.toordinal() + days > _DATES[1].toordinal() else _wall(
            self.wall + timedelta(days=days), self.zone)[0]

    def notes(self, now: float) -> list[str]:
        """With a timezone, whole days keep the wall time (and a run on a night the clocks skip or repeat it says
        what it does, as cron's do) while hours keep it elapsed time; without one, whole days drift an hour at
        the user's next clock change: all said aloud."""
        zone, due = self.zone, self.next_after(now)
        if self.wall is not None and self.days and isinstance(zone, ZoneInfo):
            said, days = [], self.step // 86400
            for instant in [c for c in _transitions(zone, math.floor(now / 86400)) if c > now][:2]:
                day = datetime.fromtimestamp(instant, zone).date()
                run, note = _wall(datetime.combine(day, self.wall.time()), zone)
                apart = (day - self.wall.date()).days
                if note and apart >= self.first * days and not apart % days and now < run and self.start <= run \
                        <= self.until:
                    said.append(note.replace(": runs at", ": that day it runs at"))
            return said
        if self.wall is not None or not self.days or due is None or not isinstance(zone, ZoneInfo):
            return [] if self.days or self.wall is None else ["`every` counts elapsed time: only whole days and "
                                                               "weeks keep the wall time"]
        change = next((change for change in _transitions(zone, math.floor(due / 86400)) if change > due), None)
        if change is None or (later := self.next_after(math.nextafter(change, -math.inf))) is None:
            return []
        was, then = (datetime.fromtimestamp(t, zone).strftime("%H:%M:%S").removesuffix(":00") for t in (due, later))
        return [] if was == then else [f"runs at {then} after {datetime.fromtimestamp(change, zone).date()}: `every` "
                                       f"counts elapsed time; add `timezone` to keep {was}"]


def _timing(parsed: _Timing | _Interval | None, mtime: float, user_zone: tzinfo) -> _Timing | None:
    """A file's timing from what its parser made (None: an immediate's): whole, but for an interval, which
    needs what the parser does not know, the file's mtime and the user's zone."""
    if not isinstance(parsed, _Interval):
        return parsed
    own, start = parsed.own, parsed.start
    origin, first = (start, 0) if start > -math.inf else (float(math.floor(mtime)), 1)
    there = None if own is None else datetime.fromtimestamp(origin, own).replace(tzinfo=None)
    return _Every(own or user_zone, start, parsed.until, parsed.catch_up, step=parsed.step, days=parsed.days,
                  origin=origin, first=first, wall=parsed.wall or there)


class _Downtime(NamedTuple):
    """What a start-up knows of the time no harness ran: the last harness's last sign of life (None: unknown,
    no harness was here), when it let the directory go (its shutdown grace: an immediate written until then
    was accepted), and this start-up's time."""

    alive: float | None
    held: float | None
    start: float


class _Outcome(enum.StrEnum):
    """What becomes of a valid file now; one that drops the file is what its history records."""

    RUN = enum.auto()  # at once: the occurrence ``due``, then ``next_due``
    SCHEDULE = enum.auto()  # at ``due``
    STALE = enum.auto()  # an immediate written while no harness ran
    MISSED = enum.auto()  # a one-shot that fell due while no harness ran
    ENDED = enum.auto()  # a periodic whose last run went by while no harness ran
    INVALID = enum.auto()  # written after its time: the writer's mistake


@dataclass(frozen=True)
class _Verdict:
    """What becomes of a valid file now, with the ``reason`` that is logged and told; ``skipped``: the occurrence
    a start-up did not catch up."""

    outcome: _Outcome
    due: float | None = None
    next_due: float | None = None
    reason: str = ""
    skipped: float | None = None


def _judge(event: Event, written: float, now: float, timing: _Timing | None,
           down: _Downtime | None = None, misfire_grace: float = 0.0) -> _Verdict:
    """Judge a valid file ``written`` at that time (an immediate: when it entered the directory, its ctime).
    ``down=None``: a running harness sees it now (what ``--check`` assumes); else a start-up, after no harness
    ran.  What had fired was due before the last sign of life: no late run is ever one that began."""
    alive = -math.inf if down is None or down.alive is None else down.alive
    if timing is None:
        held = max(alive, -math.inf if down is None or down.held is None else down.held)
        if down is not None and held + _COARSE < written < down.start - _COARSE:
            return _Verdict(_Outcome.STALE, reason="it was written while no harness was running")
        return _Verdict(_Outcome.RUN)
    # a clock stepped back: no periodic occurrence again; a one-shot still here never ran (its file goes as it runs)
    following = timing.next_after(now if isinstance(timing, _Once) else max(now, alive))
    first = timing.next_after(written) if following is None or isinstance(timing, _Once) else following
    if first is None:  # a one-shot written at or after its time, a periodic after its last run
        return _Verdict(_Outcome.INVALID, reason=_written_late(event, timing, now))
    # a periodic's latest occurrence since the last sign of life: it runs late, or it was skipped
    missed = None if isinstance(timing, _Once) or down is None or down.alive is None else \
        _latest(timing, max(alive, written), now)
    late = _late_run(timing, now, down, misfire_grace, written, missed)
    if late is not None:
        return _Verdict(_Outcome.RUN, late, following)
    if isinstance(timing, _Once):
        if following is not None:
            return _Verdict(_Outcome.SCHEDULE, following)
        return _Verdict(_Outcome.MISSED, first, reason=_missed_reason(timing, first, down))
    if following is not None:
        return _Verdict(_Outcome.SCHEDULE, following, skipped=missed)
    return _Verdict(_Outcome.ENDED, reason="it has no run left", skipped=missed)


def _late_run(timing: _Timing, now: float, down: _Downtime | None, grace: float, since: float,
              missed: float | None = None) -> float | None:
    """The occurrence that runs late at a start-up, if one does: the latest that fell due since the last
    sign of life (``missed``; a one-shot: since it was written) and is within the takeover's reach,
    ``misfire_grace`` or the file's ``catchUp``.  What was due before the last sign of life was still
    waiting: it runs."""
    if isinstance(timing, _Once):
        at = timing.at
        if at > now:
            return None
        if down is None or down.alive is not None and at <= down.alive:  # seen late by a running harness, or
            return at  # still waiting when the last one died
        takeover = down.alive is not None and at - down.alive <= _TAKEOVER
        return at if takeover or now - at <= grace else None
    if down is None:  # written a moment before an occurrence, seen a moment after it
        return _latest(timing, max(since, now - _TAKEOVER), now)
    if down.alive is None or missed is None:  # first start: nothing is caught up
        return None
    reach = max(grace, timing.catch_up or 0.0)
    return missed if missed - down.alive <= _TAKEOVER or now - missed <= reach else None


def _latest(timing: _Timing, low: float, high: float) -> float | None:
    """The latest occurrence in (low, high], looked for backwards in widening steps, since a schedule has
    no previous-run arithmetic."""
    span = 60.0
    while True:
        begin = max(low, high - span)
        latest, due = None, timing.next_after(begin)
        while due is not None and due <= high:
            latest, due = due, timing.next_after(due)
        if latest is not None or begin <= low:
            return latest
        span *= 16


def _written_late(event: Event, timing: _Timing, now: float) -> str:
    if isinstance(timing, _Once):
        return f'"at" {event.at} is {_duration(now - timing.at)} in the past (it is now {_iso(now, timing.zone)})'
    return f"it was written after its last run (it is now {_iso(now, timing.zone)})"


def _missed_reason(timing: _Timing, due: float, down: _Downtime | None) -> str:
    return f"it was due at {_iso(due, timing.zone)} while no harness was running{_between(down, timing.zone)}"


def _between(down: _Downtime | None, zone: tzinfo | None) -> str:
    return "" if down is None or down.alive is None else f" (from {_iso(down.alive, zone)} to {_iso(down.start, zone)})"


def _iso(t: float, zone: tzinfo | None) -> str:
    """An instant as ISO 8601 to the second, with its offset, in ``zone``."""
    return datetime.fromtimestamp(t, zone).isoformat(timespec="seconds")


# --- Directory scanning: each poll's stats, compared with what was seen before ---

# git's "racy timestamp" rule: a file (or the directory) looked at less than one timestamp tick after it was
# changed may change again within that tick without its stat changing, so it is looked at again until that
# is older.  The change is the ctime, which no `touch -d` can set.  Filesystems that stamp whole seconds get
# the coarsest tick (FAT's 2 s); the others stamp from the kernel's coarse clock, a few ms a tick.
_RACY = 0.05
_RACY_WHOLE_SECONDS = 2.0
# The sweep stats this many known files a second, in turn, for rewrites in place (which leave the
# directory's mtime alone): a rewrite is seen within len(files) / _SWEEP_RATE seconds, at a bounded cost a second.
_SWEEP_RATE = 1000

_Signature = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns: any change is a change


def _signature(st: os.stat_result) -> _Signature:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _is_racy(st: os.stat_result, now: float) -> bool:
    """Too close to ``now`` to trust: the file may change again with the same stat.  A change well after ``now``
    (the clock stepped back, or a simulated one is behind) is not: the next one is stamped otherwise."""
    whole = st.st_mtime_ns % 1_000_000_000 == 0 and st.st_ctime_ns % 1_000_000_000 == 0
    return abs(now - st.st_ctime_ns / 1e9) < (_RACY_WHOLE_SECONDS if whole else _RACY)


def _is_event_name(name: str) -> bool:
    """An event file's name: ``NAME.json``; dot-names (temporaries, our own files) are never touched."""
    return name.endswith(".json") and not name.startswith(".")


class _Scanner:
    """Polls one directory.  A poll is one ``stat`` of the directory; it is listed again only when its mtime
    changed (or is racy), and a sweep stats the known files in turn for rewrites in place.  ``poll`` yields
    ``(name, signature or None)`` for each file created, changed or deleted since the last one."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock  # the watcher's: a change is racy by its time
        self.ignore: str | None = None  # the history's name, when it lies in the directory under an event's name
        self.known: dict[str, _Signature] = {}
        self.racy: set[str] = set()  # looked at too soon: their content is read again
        self.not_regular: dict[str, _Signature] = {}  # *.json that are not regular files, warned about
        self.list_error: str | None = None  # the directory's last listing error, said once
        self._dir: _Signature | None = None
        self._fd = -1  # the directory, open: a stat through it costs half as much as by path
        self._cursor: list[str] = []
        self._sweep_debt = 0.0  # files the sweep owes, at _SWEEP_RATE
        self._last = time.monotonic()

    def poll(self) -> Iterator[tuple[str, _Signature | None]]:
        now = self.clock()
        try:
            st = os.stat(self.path)
            if self._dir is None or self._dir[0] != st.st_ino:  # first, or a directory made anew
                self.close()
                self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            yield from self._lost(exc)
            return
        if self._dir != (sig := _signature(st)) or _is_racy(st, now):
            self._dir = sig
            yield from self._list(now)
        else:
            yield from self._sweep(now)

    def _list(self, now: float) -> Iterator[tuple[str, _Signature | None]]:
        try:
            with os.scandir(self._fd) as entries:
                found = {e.name: e.inode() for e in entries if _is_event_name(e.name)}
            if self.ignore:
                found.pop(self.ignore, None)
        except OSError as exc:
            yield from self._lost(exc)
            return
        if self.list_error:
            log.warning("events directory %s can be listed again", self.path)
            self.list_error = None
        self.not_regular = {name: sig for name, sig in self.not_regular.items() if name in found}
        seen = []
        for name, inode in found.items():
            known = self.known.get(name)
            if known and known[0] == inode and name not in self.racy:
                continue  # the same file: the sweep looks at it (a listing stats only the new and the replaced)
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=self._fd)
            except OSError:
                st = None
            seen.append((st.st_mtime_ns if st else 0, name, st))
        for _, name, st in sorted(seen, key=lambda item: item[:2]):  # in order of mtime, then name
            yield from self._compare(name, st, now)
        for name in [name for name in self.known if name not in found]:
            yield from self._compare(name, None, now)

    def _sweep(self, now: float) -> Iterator[tuple[str, _Signature | None]]:
        """Stat the files owed since the last poll, in turn, and the racy ones every time."""
        mono = time.monotonic()
        self._sweep_debt = min(self._sweep_debt + (mono - self._last) * _SWEEP_RATE, len(self.known) + 1.0)
        self._last = mono
        names = list(self.racy)
        while self._sweep_debt >= 1 and self.known:
            if not self._cursor:
                self._cursor = list(self.known)
            names.append(self._cursor.pop())
            self._sweep_debt -= 1
        for name in names:
            try:
                st = os.stat(name, dir_fd=self._fd)
            except OSError:
                st = None
            if st is None or self.known.get(name) != _signature(st) or name in self.racy:  # else: as it was
                yield from self._compare(name, st, now)

    def _compare(self, name: str, st: os.stat_result | None, now: float) -> Iterator[tuple[str, _Signature | None]]:
        """Compare one file's stat with what is known; a racy file is handed on again, to be read again."""
        if st is not None and not stat.S_ISREG(st.st_mode):
            if self.not_regular.get(name) != _signature(st):  # said once, until it changes
                log.warning("%s: ignored: it is not a regular file", name)
                self.not_regular[name] = _signature(st)
            st = None
        if st is None:
            if self.known.pop(name, None) is not None:
                self.racy.discard(name)
                yield name, None
            return
        if self.known.get(name) != (sig := _signature(st)) or name in self.racy:
            self.known[name] = sig
            yield name, sig
        (self.racy.add if _is_racy(st, now) else self.racy.discard)(name)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _lost(self, exc: OSError) -> Iterator[tuple[str, _Signature | None]]:
        """The directory cannot be listed: said once; its files count as gone until it can (what cannot be
        seen may have been deleted, and must not fire; listed again, each file is read anew)."""
        if self.list_error != str(exc):
            self.list_error = str(exc)
            log.error("events directory %s cannot be listed: %s", self.path, exc.strerror or exc)
        self._dir = None
        for name in list(self.known):
            del self.known[name]
            yield name, None
        self.racy.clear()


# --- The schedule: a heap of due times, as sched.py keeps it ---


class _Schedule:
    """When each file next needs the scheduler: its occurrence, or its next read while it may be mid-write.
    A file has at most one live entry; rescheduling or cancelling it bumps the file's generation, and an
    entry of an older generation is dropped when it comes up (no Timer, no thread per event)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, int] = {}  # name -> the generation of its live entry
        self._generations = itertools.count()

    def push(self, due: float, name: str) -> None:
        generation = next(self._generations)
        self._live[name] = generation
        heapq.heappush(self._heap, (due, generation, name))
        if len(self._heap) > 2 * len(self._live) + 64:  # many rescheduled: keep the heap to the live ones
            self._heap = [entry for entry in self._heap if self._live.get(entry[2]) == entry[1]]
            heapq.heapify(self._heap)

    def cancel(self, name: str) -> bool:
        """Drop the file's live entry; True if it had one."""
        return self._live.pop(name, None) is not None

    def __len__(self) -> int:
        return len(self._live)

    def next_due(self) -> float | None:
        while self._heap and self._live.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[float, str]]:
        """The entries due at ``now``, earliest first, as (due, name); they are used up."""
        due_now = []
        while (due := self.next_due()) is not None and due <= now:
            name = heapq.heappop(self._heap)[2]
            del self._live[name]
            due_now.append((due, name))
        return due_now


# --- The channel queues: one run at a time per channel, at most max_queued waiting ---


# A new worker starts only when every running job has run this long: quick runs, as in a burst, are passed on by
# the workers there are (on the GIL more threads only wait on each other), while a handler that waits on I/O
# for 10 ms or more (an agent's run takes seconds) gets its channels run concurrently.
_SPAWN_AFTER = 0.01


@dataclass(eq=False, slots=True)
class _Job:
    """One run on a channel: an occurrence of a file's ``event``, a notice, or a user's function."""

    channel: str
    run: Callable[[], None]
    event: Event | None = None
    notice: bool = False  # a notice (or a submit()'s message) waits beside the events: never counted nor discarded


class _Channels:
    """Per-channel FIFO queues (a ``deque`` with an explicit length check: ``maxlen`` would drop the oldest,
    we refuse the newest), emptied by a pool of workers started by ``spawn``: a worker runs the first job of
    the next ready channel, one at a time per channel, and lingers ``linger`` seconds for more before it goes,
    so a burst of short runs needs few threads and an idle harness none.  The scheduler's thread puts and
    withdraws; workers take; ``submit``, ``close`` and ``wait`` may come from any thread: one lock guards all."""

    def __init__(self, max_queued: int, spawn: Callable[[Callable[[], None]], object], linger: float) -> None:
        self.max_queued = max_queued
        self._spawn = spawn
        self._linger = linger
        lock = threading.Lock()
        self._lock = threading.Condition(lock)  # idle workers wait on it for a ready channel
        self._ended = threading.Condition(lock)  # wait() waits on it for runs, and workers, to end
        self._waiting: dict[str, deque[_Job]] = {}  # a channel is here while it is busy
        self._events: dict[str, int] = {}  # how many of a busy channel's waiting jobs are not notices
        self._ready: deque[str] = deque()  # busy channels with nothing running, in turn
        self._running: dict[str, int] = {}  # channel -> the thread running its job
        self._began = -math.inf  # when the latest job began (monotonic)
        self._idle = 0  # workers waiting for a ready channel
        self._workers = 0
        self._held = False  # a start-up queues all it judged runnable before anything runs
        self.closed = False

    def room(self, channel: str) -> bool:
        """May one more event wait on ``channel`` (fewer than ``max_queued`` do)?  Only the scheduler's thread
        queues events (a submit()'s message is none), so the answer holds until it puts one."""
        with self._lock:
            return self._events.get(channel, 0) < self.max_queued

    def put(self, job: _Job, limit: bool = True) -> bool:
        """Queue ``job``; False when ``limit`` and the channel already has ``max_queued`` events waiting (or
        the watcher stops)."""
        with self._lock:
            queue = self._waiting.get(job.channel)
            full = limit and not job.notice and self._events.get(job.channel, 0) >= self.max_queued
            if self.closed or full:
                return False
            if queue is not None:  # busy: its turn comes
                queue.append(job)
                self._events[job.channel] += not job.notice
                return True
            self._waiting[job.channel], self._events[job.channel] = deque([job]), int(not job.notice)
            self._ready.append(job.channel)
        self.dispatch()
        return True

    def hold(self) -> None:
        with self._lock:
            self._held = True

    def release(self) -> None:
        with self._lock:
            self._held = False
        self.dispatch()

    def dispatch(self) -> None:
        """See that a ready channel gets a worker: a waiting one, else new ones once none is on its way and every
        running job has run _SPAWN_AFTER: as many as there are workers, so that while all runs are slow the pool
        doubles at each poll (it is called at every poll and put) until each ready channel has one."""
        with self._lock:
            if self._held or self._idle >= len(self._ready):  # a waiting worker takes it (or none is ready)
                self._lock.notify(len(self._ready))
                return
            if self._workers > self._idle + len(self._running) or \
                    self._running and time.monotonic() - self._began < _SPAWN_AFTER:
                return
            more = min(len(self._ready) - self._idle, max(1, self._workers))
            self._workers += more
        for started in range(more):
            try:
                self._spawn(self._work)
            except Exception as exc:  # "can't start new thread": the workers there are go on; tried again later
                with self._lock:
                    self._workers -= more - started
                log.error("cannot start a worker: %s", exc)
                return

    def submit(self, channel: str, fn: Callable[[], None]) -> bool:
        """A user's own message: refused while the channel runs or has anything waiting."""
        with self._lock:
            if channel in self._waiting or self.closed:
                return False
            self._waiting[channel], self._events[channel] = deque([_Job(channel, fn, notice=True)]), 0
            self._ready.append(channel)
        self.dispatch()
        return True

    def withdraw(self, channel: str, name: str) -> list[_Job]:
        """Take a file's waiting occurrences off its channel's queue (the file was removed or changed)."""
        with self._lock:
            queue = self._waiting.get(channel, deque())
            taken = [job for job in queue if job.event and job.event.filename == name and not job.notice]
            for job in taken:
                queue.remove(job)
                self._events[channel] -= 1
            if taken and not queue and channel not in self._running:  # nothing left: not busy any more
                del self._waiting[channel], self._events[channel]
                self._ready.remove(channel)
            return taken

    def waiting(self, channel: str, name: str) -> bool:
        with self._lock:
            return any(job.event and job.event.filename == name and not job.notice
                       for job in self._waiting.get(channel, ()))

    def close(self) -> list[_Job]:
        """Stop taking jobs and drop what waits; the running ones go on, and idle workers go at once."""
        with self._lock:
            self.closed = True
            dropped = [job for queue in self._waiting.values() for job in queue]
            self._waiting = {channel: deque() for channel in self._running}
            self._events = dict.fromkeys(self._running, 0)
            self._ready.clear()
            self._lock.notify_all()
            return dropped

    def wait(self, timeout: float | None) -> list[str]:
        """Wait up to ``timeout`` for the running jobs (not the caller's own) and, once closed, for the workers
        to be gone; return the channels still running."""
        me = threading.get_ident()
        mine: Callable[[], int] = lambda: sum(ident == me for ident in self._running.values())
        with self._lock:
            self._ended.wait_for(lambda: len(self._running) == mine() and not (self.closed and self._workers > mine()),
                                 timeout)
            return sorted(channel for channel, ident in self._running.items() if ident != me)

    def _work(self) -> None:
        """A worker: ready channels' jobs, one at a time, until none has been ready for ``linger`` seconds."""
        job = None
        while (job := self._next(job)) is not None:
            try:
                job.run()
            except BaseException:  # a job reports its own errors: the last resort, never a dead worker or channel
                log.exception("channel %s: a run failed", job.channel)

    def _next(self, done: _Job | None) -> _Job | None:
        """End the worker's ``done`` job (its channel's next is ready in turn), and take the next ready one;
        None: the worker goes, as none was ready for ``linger`` seconds (or the pool closed)."""
        with self._lock:
            if done is not None:
                del self._running[done.channel]
                if self._waiting[done.channel]:
                    self._ready.append(done.channel)  # this worker takes it, or the next ready one, at once
                else:
                    del self._waiting[done.channel], self._events[done.channel]
                self._ended.notify_all()  # only wait() waits on it: the idle workers sleep on
            self._idle += 1
            self._lock.wait_for(lambda: self._ready or self.closed, self._linger)
            self._idle -= 1
            if not self._ready:
                self._workers -= 1
                self._ended.notify_all()  # stop() waits for the workers to be gone
                return None
            job = self._waiting[(channel := self._ready.popleft())].popleft()
            self._events[channel] -= not job.notice
            self._running[channel], self._began = threading.get_ident(), time.monotonic()
            return job


# --- The history: one JSON line per outcome, for the agent and its operator ---

class _History:
    """Appends a JSON line per outcome to ``path`` (none when None).  Each line is one append, so lines never
    interleave, and starts on a fresh line, so a torn last line (a harness killed while writing it) never
    merges into the next.  A new file is made 0600: it holds the agent's event texts."""

    def __init__(self, path: str | None, clock: Callable[[], float]) -> None:
        self.path = path
        self.clock = clock
        self._failing = False  # said once until it works again

    def record(self, outcome: str, event: Event, due: float | None = None, detail: str | None = None) -> None:
        if self.path is None:
            return
        line = {"time": datetime.fromtimestamp(self.clock(), UTC).isoformat(timespec="milliseconds"),
                "filename": event.filename, "type": event.type, "channelId": event.channel_id,
                "outcome": outcome, "dueAt": None if due is None else _iso(due, UTC), "detail": detail}
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self._failing:
                log.error("history %s cannot be written: %s", self.path, exc.strerror or exc)
            self._failing = True
            return
        if self._failing:
            log.warning("history %s can be written again", self.path)
            self._failing = False


# --- The files and their runs: what each file becomes, and the records that outlive a crash ---

# Every run, and every notice not yet told, has a crash record in the private directory DIR/.mom_events/,
# written by the harness before the run begins (before a notice's file goes): what to tell if this harness
# never removes it (a run's message as delivered, told `interrupted`; a notice, as it is), the file still to
# delete, and the sessions of the commands the run started.  The next start stops each run's processes and
# tells every record.  A record never depends on the event file, which may change or vanish meanwhile.
_RECORDS = ".mom_events"
_OLD_MARKER = ".mom_events.run."  # 0.2.0 kept its markers in DIR itself: read once, at the next start
_RETRIES = (0.1, 0.2, 0.4)  # a bad file may be mid-write: read again after these
_LISTED = 10  # a coalesced notice lists its first events, each text cut at 500 characters


def _proc_session(pid: int | str, dead: bool = False) -> tuple[int, int] | None:
    """A process's session id and start time (clock ticks since boot); None when it is gone, or (unless ``dead``) a
    zombie, which no signal reaches.  Read after the last ")", as the name before it may hold any character."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return None if fields[0] in (b"Z", b"X") and not dead else (int(fields[3]), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def _belongs_to_run(tags: set[bytes], sessions: dict[int, int], environ: bytes, seen: tuple[int, int] | None,
          leaders: dict[int, int | None]) -> bool:
    """Whether a process is a run's: its ``environ`` carries a run's tag, or it is in a run's session (``sessions``:
    sid -> the leader's start; ``seen``: its sid and start) since the leader began, and pid sid is that leader still
    or gone (``leaders``: its start now, or None); so a recycled pid or session id is never taken for the run's."""
    if tags.intersection(environ.split(b"\0")):
        return True
    sid, start = seen or (0, 0)  # none: no run's session has the id 0 (or 1, init's: a record said so falsely)
    return sid > 1 and sid in sessions and start >= sessions[sid] and leaders.get(sid) in (None, sessions[sid])


def _stop_run(*run_ids: str, sessions: Iterable[tuple[int, int]] = (), wait: float = 1.0) -> int:
    """Stop every process of these runs: SIGTERM, then SIGKILL to what is left ``wait`` seconds later.  A run's
    processes carry its ``MOM_EVENT_RUN`` (a child that leaves the session with ``setsid`` too), or are in its
    session (sid, the leader's start: one that renames itself or clears its environment).  Returns how many."""
    tags = {f"MOM_EVENT_RUN={run_id}".encode() for run_id in run_ids}
    started = dict(sessions)

    def members() -> list[int]:
        pids = []
        leaders = {sid: now[1] if (now := _proc_session(sid)) else None for sid in started}
        for pid in filter(str.isdigit, os.listdir("/proc") if tags or started else ()):
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    env = environ.read()
            except OSError:  # gone, or another user's
                env = b""
            if _belongs_to_run(tags, started, env, _proc_session(pid) if started else None, leaders):
                pids.append(int(pid))
        return pids

    def kill(pids: list[int], signo: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signo)

    found = members()
    kill(found, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while members() and time.monotonic() < deadline:
        time.sleep(0.02)
    deadline = time.monotonic() + 5
    while (pids := members()) and time.monotonic() < deadline:  # and what they fork meanwhile, till none is left
        kill(pids, signal.SIGKILL)
        time.sleep(0.01)
    return len(found)


_ID_PREFIX = os.urandom(6).hex()  # this process's: ids from a counter need no random bytes each (a syscall)
_ID_COUNT = itertools.count()


def _new_id() -> str:
    """A run's (or a temporary's) id, unique across processes and restarts."""
    return f"{_ID_PREFIX}{next(_ID_COUNT):x}"


def _remove_judged(directory: str, name: str, sig: _Signature, rename_to: str | None = None) -> bool:
    """Delete the file ``name`` (or rename it to ``rename_to``) if it is still the one that was judged: it is
    moved first and checked there, so that a newer file an ``mv`` put under its name is never lost."""
    path = os.path.join(directory, name)
    aside = os.path.join(directory, rename_to or f".mom_events.take.{_new_id()}")  # a dot-name: never an event
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    try:
        if _signature(os.stat(aside))[:3] == sig[:3]:  # a rename changes the ctime, nothing else
            if rename_to is None:
                os.unlink(aside)
            return True
        os.link(aside, path, follow_symlinks=False)  # a newer file: back under its name, unless a newer still is
    except FileExistsError:
        pass
    except OSError:
        os.rename(aside, path)
        raise
    os.unlink(aside)
    return False


def _still_judged(directory: str, name: str, sig: _Signature) -> bool:
    """Is the file ``name`` still the one that was judged (a periodic's, as its run begins)?"""
    with contextlib.suppress(FileNotFoundError):
        return _signature(os.stat(os.path.join(directory, name)))[:3] == sig[:3]
    return False


def _record_name(run_id: str, name: str) -> str:
    """.mom_events/run.ID.NAME: the name says whose record it is before its content does (a file moved
    there whose record is not yet written); without NAME when the two would be too long a name."""
    record = f"run.{run_id}.{name}"
    return f"{_RECORDS}/{record if len(os.fsencode(record)) <= 255 else f'run.{run_id}'}"


def _record_path(directory: str, run_id: str, name: str) -> str:
    return os.path.join(directory, _record_name(run_id, name))


# The largest record: an event moved there (1 MiB) and a message that quotes its text, JSON-escaped (\u0001 is six
# bytes for one), with room for its sessions.
_RECORD_MOST = 8 * MAX_FILE_BYTES
_SEPARATOR = b"\n\0"  # begins a record; what stands before it is the event file moved there (JSON holds no NUL)


_Taking = tuple[str, _Signature, str | None]  # a file still to go: its name, as judged, and where (None: deleted)


def _write_record(directory: str, run_id: str, tell: Event, file: _Taking | None,
                  how: str = "new") -> bool:
    """Write a crash record: a ``new`` file, ``append``ed to the event file moved in its place, or ``again``
    (replaced whole, as a coalesced notice grows).  False, logged, if it cannot be."""
    path = _record_path(directory, run_id, tell.filename)
    told = {"filename": tell.filename, "type": tell.type, "channel_id": tell.channel_id, "text": tell.text,
            "due": tell.due and tell.due.isoformat()}
    data = _SEPARATOR + (json.dumps({"tell": told, "file": file}) + "\n").encode()
    written = path + ".new" if how == "again" else path
    flags = {"new": os.O_CREAT | os.O_EXCL, "append": os.O_APPEND | os.O_NOFOLLOW, "again": os.O_CREAT | os.O_TRUNC}
    try:
        fd = os.open(written, os.O_WRONLY | os.O_CLOEXEC | flags[how], 0o600)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "a short write")
        finally:
            os.close(fd)
        if how == "again":
            os.replace(written, path)
    except OSError as exc:
        log.error("%s: its crash record cannot be written: %s", tell.filename, exc.strerror or exc)
        if how != "append":
            with contextlib.suppress(OSError):
                os.unlink(written)
        return False
    return True


def _note_session(directory: str, run_id: str, name: str, session: int, start: int) -> None:
    """Add a command's session (its id, and its leader's start time) to its run's record, so that a successor
    stops what is left of it even if it renamed itself and lost its tag."""
    no_create: Callable[[str, int], int] = lambda path, flags: os.open(path, flags & ~os.O_CREAT)
    try:
        with open(_record_path(directory, run_id, name), "a", opener=no_create) as record:
            record.write(f"{session} {start}\n")
    except FileNotFoundError:  # no record (a function given to submit()): no session to note
        pass
    except OSError as exc:  # a full disk: the command runs all the same, and a successor finds it by its tag
        log.error("%s: its command's session cannot be noted: %s", name, exc.strerror or exc)


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK, 0o600)  # a FIFO put in its place never blocks a read


def _unrecord(directory: str, run_id: str, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_record_path(directory, run_id, name))


_Record = tuple[str, Event, _Taking | None, list[tuple[int, int]]]


def _records(directory: str) -> list[_Record]:
    """The crash records a dead harness left: (the run's id, what to tell, the file to take, its sessions).  An
    empty one (its harness died creating it, before the run began) is removed; one that cannot be read is kept,
    as unread.NAME, and said."""
    folder, found = os.path.join(directory, _RECORDS), list[_Record]()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name == "held" or name.startswith("unread."):
            continue
        if not name.startswith("run.") or name.endswith(".new"):  # a file being deleted, a record being replaced
            _remove_leftover(path)
            continue
        _, run_id, filename = (name + ".").split(".", 2)
        try:
            found.append((run_id, *_read_record(path, filename.removesuffix("."))))
        except _EmptyRecord:  # killed as it created the record, before the run began
            log.warning("%s: a crash record left empty by a harness that died writing it: removed", name)
            os.unlink(path)
        except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:  # never deleted: it may be a notice
            log.error("%s: a crash record that cannot be read (%s): kept as unread.%s", name, exc, name)
            try:
                os.rename(path, os.path.join(folder, "unread." + name))
            except OSError as again:  # a directory of that name in the way: it stays, and is said again
                log.error("%s: cannot be set aside: %s", name, again.strerror or again)
    return found


class _EmptyRecord(Exception):
    """A crash record with nothing in it."""


def _read_record(path: str, filename: str) -> tuple[Event, _Taking | None, list[tuple[int, int]]]:
    """What a crash record tells, the file it still takes, the sessions it names; one that is only an event file
    moved there (its harness died before it appended the record) is told as that event's run."""
    with open(path, "rb", opener=_open_nonblocking) as record:
        if not stat.S_ISREG(os.fstat(record.fileno()).st_mode):  # a device or FIFO put there: never read
            raise OSError(errno.EINVAL, "not a regular file")
        data = record.read(_RECORD_MOST + 1)
    if len(data) > _RECORD_MOST:
        raise ValueError("larger than a record can be")
    if not data:
        raise _EmptyRecord
    head, _, tail = data.partition(_SEPARATOR)
    line, *lines = tail.decode("utf-8", "replace").split("\n")
    sessions = [(int(a), int(b)) for a, b in (line.split() for line in lines if re.fullmatch(r"\d+ \d+", line))]
    if head and not (line and lines):  # the file moved there, its record not (wholly) appended: killed as its
        return _run_from_file(head, filename), None, sessions  # run was about to begin, told as that run
    kept = json.loads(line)
    told, file, due = kept["tell"], kept["file"], kept["tell"]["due"]
    event = Event(str(told["filename"]), str(told["type"]), str(told["channel_id"]), str(told["text"]),
                  due=due and datetime.fromisoformat(due))
    taking = None if file is None else (str(file[0]), tuple(map(int, file[1])), file[2] if len(file) > 2 else None)
    return event, taking, sessions  # type: ignore[return-value]


def _run_from_file(data: bytes, filename: str) -> Event:
    """What to tell of a run whose record is only its event file (its due time unknown)."""
    event = _parse(data, filename)[0]
    return Event(filename, "run", event.channel_id, event.message)


def _remove_leftover(path: str) -> None:
    log.warning("%s: left by a harness that died while it deleted or wrote it: removed", path)
    os.unlink(path)


def _upgrade(directory: str) -> None:
    """0.2.0's markers, in the directory itself, become records, once: nothing it had accepted is lost.  A file
    left aside by a take a harness died in (``_remove_judged``'s temporary) goes too."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(".mom_events.take."):
            _remove_leftover(path)
        if not name.startswith(_OLD_MARKER):
            continue
        run_id, _, filename = name[len(_OLD_MARKER):].partition(".")
        try:
            with open(path, "rb", opener=_open_nonblocking) as marker:
                data = marker.read(MAX_FILE_BYTES + 1)
            if filename:  # the event file itself, moved there (a one-shot's, an immediate's) or linked
                told, file = _run_from_file(data, filename), None
            else:  # a small file: [the notice, the file to delete]
                notice, sig = json.loads(data)
                told, file = Event(**notice), sig and (notice["filename"], tuple(sig), None)
        except (OSError, ValueError, TypeError) as exc:
            log.error("%s: a 0.2.0 marker that cannot be read (%s): kept as %s/unread%s", name, exc, _RECORDS, name)
            os.rename(path, os.path.join(directory, _RECORDS, "unread" + name))
        else:
            _write_record(directory, run_id, told, file)
            os.unlink(path)


def _interrupted(run: Event, stopped: int) -> Event:
    """What a run cut short is told: its message as it was delivered, whole."""
    were = "was" if stopped == 1 else "were"
    left = f" {_plural(stopped, 'process')} it left running {were} stopped." if stopped else ""
    return Event(run.filename, "interrupted", run.channel_id, f"This run was cut short (the harness stopped or died "
                 f"while it ran), so its outcome is unknown.{left} It was: {run.text}", due=run.due)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('s') else 's'}"


def _due_time(due: float | None, timing: _Timing | None) -> datetime | None:
    return None if due is None else datetime.fromtimestamp(due, timing.zone if timing else UTC)


def _delivered(event: Event, timing: _Timing | None, due: float | None) -> Event:
    """The event as its run is (or would have been) delivered: ``(due ...)`` in its own zone."""
    return event if due is None or timing is None else replace(event, due=_due_time(due, timing))


class _Runner:
    """The run side, on the channels' workers: a run's crash record, the handler, its file deleted and the
    record removed; a notice told.  It keeps no state of its own, so any number of workers call it at once."""

    def __init__(self, directory: str, handler: Callable[[Event], Any],
                 on_error: Callable[[Event, BaseException], Any], history: _History, clock: Callable[[], float],
                 ours: Callable[[], bool], loop: Any = None) -> None:
        self.directory = directory
        self.handler = handler
        self.on_error = on_error
        self.history = history
        self.clock = clock
        self.ours = ours  # is the directory's lock still this harness's?
        self.loop = loop  # an asyncio loop, for coroutine handlers (else the one start() finds): set before any run

    def run(self, event: Event, due: float | None, shown: datetime | None, sig: _Signature, last: bool) -> None:
        """One occurrence, ``due`` then (``shown`` in its zone).  It begins only while the lock is this harness's
        and its file is the one judged; an immediate's or one-shot's file goes as it begins (its record holds
        what to tell), a periodic's after its ``last`` run."""
        run_id = _new_id()
        late = None if due is None else self.clock() - due
        event = replace(event, due=shown, run_id=run_id, late=late if late is not None and late >= 1 else None)
        periodic = event.type == "periodic"
        try:
            begun = self.ours() and self._begin(event, sig, run_id)
        except OSError as exc:
            log.error("%s: cannot be taken for its run: %s", event.filename, exc.strerror or exc)
            begun = False
        if not begun:
            _unrecord(self.directory, run_id, event.filename)
            self.history.record("cancelled", event, due, "not run: its file changed or went, the directory is no "
                                                         "longer this harness's, or no record can be written")
            return
        if (outcome := self._call_handler(event, due)) is None:
            return
        if periodic and last:
            try:
                _remove_judged(self.directory, event.filename, sig)
            except OSError as exc:
                log.error("%s: cannot be deleted: %s; it will not run again", event.filename, exc.strerror or exc)
        _unrecord(self.directory, run_id, event.filename)
        self.history.record(*outcome)

    def _begin(self, event: Event, sig: _Signature, run_id: str) -> bool:
        """Write the run's crash record, and take its file if it goes: False if it is no longer the one judged.
        A periodic's file stays, beside a record of its own.  An immediate's or one-shot's goes now: a plain
        file moves into the record's place and the record is appended to it (one write more than 0.2.0's run);
        a link gets a record of its own and goes (its target may be anything by the time a successor looks)."""
        told = Event(event.filename, "run", event.channel_id, event.message, due=event.due)
        if event.type == "periodic":
            return _write_record(self.directory, run_id, told, None) and _still_judged(self.directory, event.filename,
                                                                                   sig)
        record = _record_name(run_id, event.filename)
        try:
            st = os.lstat(os.path.join(self.directory, event.filename))
            plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and record.endswith(event.filename)
        except FileNotFoundError:
            return False
        if not plain:
            return (_write_record(self.directory, run_id, told, (event.filename, sig, None))
                    and _remove_judged(self.directory, event.filename, sig))
        if not _remove_judged(self.directory, event.filename, sig, record):
            return False
        _write_record(self.directory, run_id, told, None, "append")  # unwritten: the file moved there is told
        return True

    def tell_notice(self, notice: Event, run_id: str) -> None:
        """A notice whose record is written: told at least once (again by the next start, if this one dies)."""
        due = None if notice.due is None else notice.due.timestamp()
        if (outcome := self._call_handler(replace(notice, run_id=run_id), due)) is not None:
            _unrecord(self.directory, run_id, notice.filename)
            self.history.record(*outcome)

    def _call_handler(self, event: Event, due: float | None) -> tuple[str, Event, float | None, str | None] | None:
        """The handler's run, and the outcome to record; None when it was cut short (a BaseException that is
        not an Exception: SystemExit, KeyboardInterrupt, a cancelled coroutine): its record stays, to be told."""
        self.history.record("started", event, due)
        try:
            self.call(self.handler, event)
        except Exception as exc:
            try:
                self.call(self.on_error, event, exc)
            except Exception:
                log.exception("%s: on_error raised", event.filename)
            return "failed", event, due, f"{type(exc).__name__}: {exc}"
        except BaseException as exc:
            log.warning("%s: cut short (%s: %s); the next start tells it interrupted", event.filename,
                        type(exc).__name__, exc)
            return None
        return "done", event, due, None

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call a handler; a coroutine runs on the watcher's loop, and this worker waits for it."""
        result = fn(*args)
        if inspect.isawaitable(result):
            if self.loop is None:
                raise TypeError("a coroutine handler needs an event loop: start the watcher inside one, or pass loop=")
            sys.modules["asyncio"].run_coroutine_threadsafe(result, self.loop).result()


@dataclass(eq=False, slots=True)
class _File:
    """One event file, as last read: one record per file, from first sight to deletion."""

    name: str
    sig: _Signature
    digest: int | None = None  # of the content last read
    event: Event | None = None
    timing: _Timing | None = None
    tries: int = 0  # reads that failed in a row while it may be mid-write


@dataclass(eq=False)
class _Gathered:
    """A ``discarded`` or ``stale`` notice waiting on its channel: each further event of its kind there joins
    it (on the scheduler's thread) until a worker begins to tell it (``begin``); ``lock`` guards the two.  It
    keeps what it shows, the first events with their texts cut, and a count: a flood costs no memory."""

    kind: str
    channel: str
    head: str  # its first sentence, {count} and {was} to fill
    first: str  # the first event's name: the notice's, and its record's
    due: float | None  # the first event's
    run_id: str = field(default_factory=lambda: _new_id())
    shown: list[tuple[str, str]] = field(default_factory=list)  # the first _LISTED: name, text cut
    count: int = 0
    begun: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, text: str, change: int = 1) -> None:
        """Count an event in (``change`` -1: out again), and show it if it is among the first."""
        self.count += change
        if change > 0 and len(self.shown) < _LISTED:
            self.shown.append((name, text[:500]))
        elif change < 0 and (name, text[:500]) in self.shown:
            self.shown.remove((name, text[:500]))

    def notice(self) -> Event:
        listed = "".join(f"\n- {name}: {text}" for name, text in self.shown)
        more = f"\nand {self.count - len(self.shown)} more." if self.count > len(self.shown) else ""
        was = "it was" if self.count == 1 else "they were"
        text = f"{self.head.format(count=_plural(self.count, 'event'), was=was)} {was.capitalize()}:{listed}{more}"
        return Event(self.first, self.kind, self.channel, text, due=_due_time(self.due, None))

    def begin(self) -> Event:
        with self.lock:
            self.begun = True
            told, self.shown = self.notice(), []
            return told


class _Notices:
    """What the agent is told of what does not run.  A notice's crash record is written before its file goes
    (so it is told even if this harness dies next); then it waits on its channel beside the events, never
    discarded.  A discarded or stale one gathers the others of its kind on that channel while it waits.  The
    scheduler's thread calls it; a gathered notice's own lock guards it against the worker that tells it."""

    def __init__(self, directory: str, runner: _Runner, channels: _Channels, history: _History, zone: tzinfo,
                 notify: bool) -> None:
        self.directory = directory
        self.runner = runner
        self.channels = channels
        self.history = history
        self.zone = zone  # the user's: a stale notice's times are shown in it
        self.notify = notify
        self._gathered: dict[tuple[str, str], _Gathered] = {}  # the told ones go when it has doubled
        self._gathered_most = 64

    def about(self, kind: str, text: str, event: Event, due: float | None, file: _File, rename_to: str | None,
              down: _Downtime | None) -> Callable[[bool], None] | None:
        """A notice of ``kind`` about a file about to go (renamed to ``rename_to``, or deleted): its record is
        written now, with the file still to go; returns what to do once the file went (or did not, as it was
        written anew meanwhile: then it is judged anew, and not told); None when notices are off."""
        if not self.notify:
            return None
        if kind in ("discarded", "stale"):
            return self.gather(kind, event, due, file, down)
        said, run_id = Event(file.name, kind, event.channel_id, text, due=_due_time(due, file.timing)), _new_id()
        _write_record(self.directory, run_id, said, (file.name, file.sig, rename_to))  # unwritten: told once
        return lambda taken: (self.queue(said, run_id) if taken else _unrecord(self.directory, run_id, said.filename))

    def gather(self, kind: str, event: Event, due: float | None, file: _File | None,
                down: _Downtime | None) -> Callable[[bool], None]:
        """Add an event to the notice of ``kind`` waiting on its channel, or start one; its record is written
        whole, with the file still to go.  Returns what to do once the file went (or did not)."""
        key, taking = (event.channel_id, kind), None if file is None else (file.name, file.sig, None)
        gathered = self._gathered.get(key)
        with gathered.lock if gathered else contextlib.nullcontext():
            fresh = gathered is None or gathered.begun
            if gathered is not None and not fresh:
                gathered.add(event.filename, event.text)
                _write_record(self.directory, gathered.run_id, gathered.notice(), taking, "again")
        if gathered is None or fresh:
            heads = {"discarded": f"{{count}} did not run: the channel already had {self.channels.max_queued} events "
                                  "waiting, so {was} discarded.",
                     "stale": "{count} did not run: {was} written while no harness was running"
                              f"{_between(down, self.zone)}, and deleted unrun."}
            gathered = _Gathered(kind, event.channel_id, heads[kind], event.filename, due)
            gathered.add(event.filename, event.text)
            self._gathered[key] = gathered
            if len(self._gathered) > self._gathered_most:  # many channels: forget what has begun to be told
                self._gathered = {key: g for key, g in self._gathered.items() if not g.begun}
                self._gathered_most = max(64, 2 * len(self._gathered))
            _write_record(self.directory, gathered.run_id, gathered.notice(), taking)

        def then(taken: bool) -> None:
            if taken and fresh:
                self.queue(gathered.notice(), gathered.run_id, gathered.begin)
            elif not taken:  # the file was written anew meanwhile: it is judged anew, and not in the notice
                with gathered.lock:
                    if gathered.begun:
                        return
                    gathered.add(event.filename, event.text, -1)
                    if gathered.count:
                        _write_record(self.directory, gathered.run_id, gathered.notice(), None, "again")
                    else:
                        gathered.begun = True  # never queued: none will join it
                        _unrecord(self.directory, gathered.run_id, gathered.first)
        return then

    def skipped(self, name: str, event: Event, timing: _Timing, due: float, following: float | None,
                down: _Downtime | None) -> None:
        """An occurrence a start-up does not catch up: recorded; told, when the file asked for a catch-up."""
        down = down or _Downtime(None, None, due)
        reason = f"it fell due at {_iso(due, timing.zone)} while no harness was running{_between(down, timing.zone)}"
        self.history.record("skipped", event, due, reason)
        if (reach := timing.catch_up) is None or not self.notify:
            return
        then = f"The file stays; its next run is at {_iso(following, timing.zone)}." if following is not None else \
            "It had no run left: the file was deleted."
        told = (f"This run was skipped: {reason}, and it would run {_duration(down.start - due)} late, more than "
                f"its catchUp of {_duration(reach)}. {then} It was: "
                f"{_delivered(event, timing, due).message}")
        notice, run_id = Event(name, "skipped", event.channel_id, told, due=_due_time(due, timing)), _new_id()
        _write_record(self.directory, run_id, notice, None)  # unwritten (a full disk): told all the same, not again
        self.queue(notice, run_id)

    def queue(self, notice: Event, run_id: str, begin: Callable[[], Event] | None = None) -> None:
        """Queue a notice whose record is written; it waits beside the events, and is never discarded."""
        run = lambda: self.runner.tell_notice(begin() if begin else notice, run_id)
        if not self.channels.closed:  # else its record stays, and the next start tells it
            self.history.record("queued", notice, None if notice.due is None else notice.due.timestamp())
            self.channels.put(_Job(notice.channel_id, run, notice, notice=True))

    def recover(self) -> None:
        """What a dead harness left: each run's processes stopped and its record told ``interrupted``, the
        files it was deleting deleted, and every notice it had not told, told (a notice's command is stopped
        first too: a notice runs a command as an event does)."""
        _upgrade(self.directory)
        records = _records(self.directory)
        notices = [(run_id, sessions) for run_id, told, _, sessions in records if told.type != "run"]
        if notices and (stopped := _stop_run(*(run_id for run_id, _ in notices),
                                             sessions=[session for _, sessions in notices for session in sessions])):
            log.warning("stopped %d processes of notices a dead harness was telling", stopped)
        for run_id, told, file, sessions in records:
            try:
                if file is not None:  # renamed to NAME.json.rejected, or deleted, as the dead harness meant to
                    _remove_judged(self.directory, *file)
            except OSError as exc:
                log.error("%s: cannot be deleted: %s; it may run again", file[0] if file else "", exc.strerror or exc)
            if told.type == "run":
                told = _interrupted(told, _stop_run(run_id, sessions=sessions))
            elif not self.notify:
                _unrecord(self.directory, run_id, told.filename)
                continue
            log.warning("%s: told again: %s", told.filename, told.message)
            self.queue(told, run_id)


class _Files:
    """What becomes of each file: read, judged, scheduled, queued, or dropped with a notice.  Only the
    scheduler's thread calls it; the runs it queues are the _Runner's, on the workers."""

    def __init__(self, directory: str, runner: _Runner, notices: _Notices, channels: _Channels, schedule: _Schedule,
                 history: _History, zone: tzinfo, misfire_grace: float) -> None:
        self.directory = directory
        self.runner = runner
        self.notices = notices
        self.channels = channels
        self.schedule = schedule
        self.history = history
        self.zone = zone  # the user's: an interval's due times are shown in it
        self.misfire_grace = misfire_grace
        self.files: dict[str, _File] = {}
        self.down: _Downtime | None = None  # during a start-up: the time no harness ran (and no queue limit)

    def on_change(self, name: str, sig: _Signature | None, now: float) -> None:
        """The scanner's news of one file: gone (``sig`` None), new, changed, or to be read again (racy)."""
        file = self.files.get(name)
        if sig is None:
            if file is not None and self._cancel(self.files.pop(name)) and file.event is not None:
                self.history.record("cancelled", file.event, detail="its file was removed")
            return
        if file is None:
            self.files[name] = file = _File(name, sig)
        self._read(file, now)

    def on_due(self, due: float, name: str, now: float) -> None:
        """A file's entry in the schedule came up: its occurrence, or its next read while it is bad."""
        file = self.files[name]
        if file.event is None:
            self._read(file, now, again=True)
        else:
            self._fire(file, due, now)

    def _read(self, file: _File, now: float, again: bool = False) -> None:
        try:  # non-blocking: a FIFO put under the name since the scan must not hang the scheduler
            fd = os.open(os.path.join(self.directory, file.name), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:  # removed since the scan: the next one says so
            return
        except OSError as exc:
            log.error("%s: cannot be read: %s; left alone until it changes", file.name, exc.strerror or exc)
            return
        with open(fd, "rb") as handle:
            st = os.fstat(fd)
            data = handle.read(MAX_FILE_BYTES + 1) if stat.S_ISREG(st.st_mode) else b""
            sig = _signature(st)
            changing = os.fstat(fd).st_ctime_ns != st.st_ctime_ns  # every write sets it
        if changing or not stat.S_ISREG(st.st_mode):  # written as it was read: the scan hands it on again (racy)
            return
        digest = hash(data)  # within this process, as good as a cryptographic one for telling a change
        if digest == file.digest and (sig[0], sig[2]) == (file.sig[0], file.sig[2]) and not again:
            return  # the same: not ctime, which a link or chmod sets, but inode and mtime (a cp -p copy is new)
        self._cancel(file)
        if digest != file.digest:
            file.tries = 0  # still being written: the retries start over
        file.sig = file.sig if sig == file.sig else sig  # an equal one is not kept twice (the scanner holds it)
        file.digest, file.event, file.timing = digest, None, None
        try:
            event, parsed, unknown = _parse(data, file.name)
            timing = _timing(parsed, min(st.st_mtime, now), self.zone)
        except _NeedsCroniter as exc:
            log.error("%s; the file is left in place", exc)
            return
        except EventError as exc:
            self._retry(file, exc.reason, data, now)
            return
        if unknown:
            log.warning("%s: unknown fields ignored: %s", file.name, ", ".join(unknown))
        file.event, file.timing = event, timing
        if isinstance(timing, _Every) and timing.first and st.st_mtime > now:  # ahead of the clock: set to now,
            try:  # so that every later start counts from it too
                if _still_judged(self.directory, file.name, sig):  # the file read, not one put in its place since
                    os.utime(path := os.path.join(self.directory, file.name), (st.st_atime, timing.origin))
                    file.sig = _signature(os.stat(path))  # as judged: its next read and its runs see no change
            except FileNotFoundError:  # gone meanwhile: the scanner says so
                pass
            except OSError as exc:  # another user's file: the next start counts from its mtime again
                log.warning("%s: its mtime is ahead of the clock and cannot be set: %s", file.name, exc.strerror or exc)
        written = st.st_ctime if timing is None else st.st_mtime  # an immediate: when it entered the directory
        written = min(written, now)  # a time ahead of the clock (cp -p, touch -d) counts as now
        self._act(file, _judge(event, written, now, timing, self.down, self.misfire_grace), now)

    def _retry(self, file: _File, reason: str, data: bytes, now: float) -> None:
        """A bad file may be mid-write: read again after 100, 200 and 400 ms, then rejected."""
        if file.tries < len(_RETRIES):
            self.schedule.push(now + _RETRIES[file.tries], file.name)
            file.tries += 1
        else:
            self._reject(file, reason, _bad_file_event(file.name, data))

    def _act(self, file: _File, verdict: _Verdict, now: float) -> None:
        event, timing = file.event, file.timing
        assert event is not None
        if verdict.skipped is not None and timing is not None:
            self.notices.skipped(file.name, event, timing, verdict.skipped, verdict.due, self.down)
        if verdict.outcome is _Outcome.RUN:
            if verdict.next_due is not None:
                self.schedule.push(verdict.next_due, file.name)
            self._queue(file, verdict.due, now, last=verdict.next_due is None)
        elif verdict.outcome is _Outcome.SCHEDULE:
            self.schedule.push(verdict.due or now, file.name)
        elif verdict.outcome is _Outcome.INVALID:
            self._reject(file, verdict.reason, event)
        elif verdict.outcome is _Outcome.MISSED:
            told = (f"This one-shot did not run: {verdict.reason}, and its file was deleted. It was: "
                    f"{_delivered(event, timing, verdict.due).message}")
            self._drop(file, "missed", verdict.reason, event, verdict.due, notice=("missed", told))
        elif verdict.outcome is _Outcome.STALE:
            self._drop(file, "stale", verdict.reason, event, notice=("stale", ""))
        elif verdict.outcome is _Outcome.ENDED:
            self._drop(file, "ended", verdict.reason, event)

    def _reject(self, file: _File, reason: str, event: Event) -> None:
        """Rename a bad file to NAME.json.rejected and tell the agent why on its channel, if it has one."""
        stop = "" if reason.endswith((".", "?")) else "."  # 'did you mean "catchUp"?' ends its own sentence
        told = f"{reason}{stop} The file is now {file.name}.rejected: fix it and move it back to {file.name}."
        self._drop(file, "invalid", reason, event, notice=("rejected", told), rename_to=file.name + ".rejected")

    def _fire(self, file: _File, due: float, now: float) -> None:
        """An occurrence is due: the next one is scheduled, this one queued."""
        assert file.timing is not None
        following = file.timing.next_after(max(due, now))  # after a forward clock step, what is due fires once
        if following is not None:
            self.schedule.push(following, file.name)
        self._queue(file, due, now, last=following is None)

    def _queue(self, file: _File, due: float | None, now: float, last: bool) -> None:
        """Queue one occurrence (the ``last`` of a file deletes it).  A start-up queues all it judged runnable:
        the queue's limit is for what comes later."""
        assert file.event is not None
        event, channels, sig, shown = file.event, self.channels, file.sig, _due_time(due, file.timing)
        if not last and channels.waiting(event.channel_id, file.name):  # a slow agent's queue gets one of each
            self.history.record("coalesced", event, due, "its previous occurrence is still waiting")
            return
        run, limit = (lambda: self.runner.run(event, due, shown, sig, last)), self.down is None
        if channels.closed:  # stop() from another thread during a step(): the file stays, for the next start
            return
        if not limit or channels.room(event.channel_id):  # said before it can start, outside the queues' lock
            self.history.record("queued", event, due)
            if not channels.put(_Job(event.channel_id, run, event), limit):  # closed meanwhile
                self.history.record("cancelled", event, due, "the harness stopped before it ran")
            return
        reason = f"its channel {event.channel_id} already has {channels.max_queued} events waiting"
        if last:  # an immediate's or one-shot's file goes, as a periodic's after its last run
            self._drop(file, "discarded", reason, event, due, notice=("discarded", ""))
            return
        log.warning("%s: %s", file.name, reason)
        self.history.record("discarded", event, due, reason)
        if self.notices.notify:
            self.notices.gather("discarded", event, due, None, self.down)(True)

    def _drop(self, file: _File, outcome: str, reason: str, event: Event, due: float | None = None,
              notice: tuple[str, str] | None = None, rename_to: str | None = None) -> None:
        """The file goes unrun: its notice's record is written first (told even if this harness dies next),
        then the file is deleted (or renamed), logged and recorded, and the notice queued.  ``notice``: its
        type and text; a discarded or stale one joins the one of its kind waiting on the channel."""
        told = None if notice is None or not event.channel_id else \
            self.notices.about(*notice, event, due, file, rename_to, self.down)
        try:
            taken = _remove_judged(self.directory, file.name, file.sig, rename_to)
        except OSError as exc:
            log.error("%s: %s; it cannot be removed (%s): it will not run", file.name, reason, exc.strerror or exc)
            taken = False
        if taken and rename_to:
            log.error("%s: %s; renamed to %s", file.name, reason, rename_to)
        elif taken:
            log.warning("%s: %s (%s)", file.name, reason, outcome)
        if taken:
            self.history.record(outcome, event, due, reason)
        if told is not None:  # written anew meanwhile (judged anew), or stuck: not told
            told(taken)

    def _cancel(self, file: _File) -> bool:
        """The file was removed or changed: what was scheduled for it goes (True if it was scheduled), and what
        of it waits in a queue."""
        scheduled = self.schedule.cancel(file.name)
        if file.event is not None:
            for job in self.channels.withdraw(file.event.channel_id, file.name):
                self.history.record("cancelled", job.event or file.event, detail="its file was removed or changed")
        return scheduled


_CHANNEL_KEY = re.compile(r"""["']channelId["']\s*:\s*(?:"([^"\\\s]*)"|'([^'\\\s]*)')""")


def _bad_file_event(name: str, data: bytes) -> Event:
    """What a bad file says of itself, for the history and the notice: its type, and its channel, if it has
    one; in a file whose JSON does not parse (the agent's likeliest slips), the first ``channelId`` quoted
    with " or ' whose value is a channel."""
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        obj = None
    fields = obj if isinstance(obj, dict) else {}
    candidates = [fields.get("channelId")] if obj is not None else [a or b for a, b in _CHANNEL_KEY.findall(text)]
    channel = next((c for c in candidates if isinstance(c, str) and 0 < len(c) <= 255 and not _channel_fault(c)), "")
    kind = fields.get("type")
    return Event(name, kind if isinstance(kind, str) and kind in TYPES else "unknown", channel, "")


# --- The watcher: the scanner, the schedule, the channels and the files, joined ---

_LOCK = ".mom_events.lock"  # flock'ed by the harness that holds the directory; its mtime: the last sign of life
_JOURNAL = ".mom_events.journal"  # the run journal of version 0.1, replaced by crash records: removed at start
_STANDBY_TRY = 0.2  # how often a standby tries the lock


def _thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, daemon=True, name="mom_events worker").start()


def _sd_notify(message: str) -> None:
    """systemd's notify protocol: one datagram, never waited for (a socket no one reads holds nothing up)."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as sock:
            sock.sendto(message.encode(), "\0" + address[1:] if address.startswith("@") else address)
    except OSError:
        pass


class _DirectoryLock:
    """The directory's lock file, flock'ed by the harness that holds the directory.  Its mtime is that harness's
    last sign of life, set before anything fires (never set back: after the clock steps back, what had fired is
    still before it); DIR/.mom_events/held's mtime, set each second of the stop's grace, is until when it held
    the directory.  A start-up reads both: what fell due before them had fired, or was accepted."""

    def __init__(self, directory: str, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.path = os.path.join(directory, _LOCK)
        self.clock = clock
        self.fd: int | None = None  # never None while runs may begin: the workers ask ``ours``
        self._ino = -1
        self._alive = -math.inf  # the last sign of life set

    def take(self) -> bool:
        """Take the lock, or return False; the lock held before (a directory made anew) goes."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        held, (self.fd, self._ino) = self.fd, (fd, os.fstat(fd).st_ino)
        if held is not None:
            os.close(held)
        return True

    def claim(self, now: float, alive: float | None) -> None:
        """This process's PID, and its first sign of life: from now on it counts as a harness that ran.  The last
        harness's (``alive``) is never set back: after a clock stepped back, a restart still runs nothing twice."""
        assert self.fd is not None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        self.mark_alive(max(now, -math.inf if alive is None else alive))

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def ours(self) -> bool:
        """Is the lock file at the directory's path still the one held (a run begins only then)?"""
        try:
            return self.fd is not None and os.stat(self.path).st_ino == self._ino
        except OSError:
            return not os.path.isdir(self.directory)  # gone: the scanner says so, and its files count as gone

    def mark_alive(self, now: float) -> None:
        if self.fd is None:  # let go by a stop() from another thread, as a step() ran
            return
        self._alive = max(self._alive, now)
        try:
            os.utime(self.fd, (self._alive, self._alive))
        except OSError as exc:
            log.error("the lock file's time cannot be set: %s", exc.strerror or exc)

    def note_held(self) -> None:
        if self.fd is None or self._alive == -math.inf:  # a start-up that failed held nothing
            return
        held = os.path.join(self.directory, _RECORDS, "held")
        t = max(self._alive, self.clock())
        try:
            os.close(os.open(held, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.utime(held, (t, t))
        except OSError as exc:
            log.error("%s cannot be written: %s", held, exc.strerror or exc)

    def holder(self) -> str:
        try:
            with open(self.path) as lock:
                pid = lock.read().strip() or "?"
        except OSError:
            pid = "?"
        return f"{self.directory} is already watched by process {pid} (lock file {_LOCK})"


class EventsWatcher:
    """Watches ``events_dir`` and calls ``handler(event)`` on a worker thread when each event is due: one
    run at a time per channel, channels concurrently.  See the README for the parameters.  ``start``, ``step``
    and the scheduling run on the caller's thread or the watcher's own; ``stop`` and ``submit`` on any."""

    def __init__(self, events_dir: str | os.PathLike[str], handler: Callable[[Event], Any],
                 on_error: Callable[[Event, BaseException], Any] | None = None, poll_interval: float = 0.04,
                 max_queued: int = 5, clock: Callable[[], float] = time.time, loop: Any = None,
                 history: str | os.PathLike[str] | None = None, misfire_grace: float = 0.0, standby: bool = False,
                 notify: bool = True, systemd: bool = False, timezone: str | None = None,
                 spawn: Callable[[Callable[[], None]], object] | None = None) -> None:
        self.directory = os.fspath(events_dir)
        self.poll_interval = poll_interval
        self.clock = clock
        self.standby = standby
        self.systemd = systemd
        self._history_path = None if history is None else os.fspath(history)
        self._channels = _Channels(max_queued, spawn or _thread, 0.0 if spawn else 2.0)  # a spawned one never lingers
        self._schedule = _Schedule()
        history_log = _History(self._history_path, clock)
        self._lock = _DirectoryLock(self.directory, clock)
        self._runner = _Runner(self.directory, handler, on_error or _log_error, history_log, clock,
                              self._lock.ours, loop)
        name = timezone or _host_timezone()  # an IANA zone follows daylight saving; a fixed offset would not
        zone = _zone(name) if name else datetime.now().astimezone().tzinfo or UTC
        self._notices = _Notices(self.directory, self._runner, self._channels, history_log, zone, notify)
        self._files = _Files(self.directory, self._runner, self._notices, self._channels, self._schedule, history_log,
                             zone, misfire_grace)
        self._scanner = _Scanner(self.directory, clock)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._heartbeat = -math.inf  # when the last heartbeat was said (systemd's watchdog)

    @property
    def running(self) -> bool:
        """True from ``start()`` until ``stop()``, or until the watcher stops by itself (a standby whose takeover
        failed, a directory made anew that another harness took): then it logged why."""
        return self._started and not self._stopping.is_set()

    def start(self, thread: bool = True) -> None:
        """Take the directory's lock, act on what is there and return; events fire on a background thread
        (``thread=False``: the caller takes each ``step``).  A standby waits for the lock on that thread."""
        if self._started or self._stopping.is_set():
            raise RuntimeError("a watcher starts once, and not after stop(): make a new one")
        if self._runner.loop is None and "asyncio" in sys.modules:  # a coroutine handler runs on the caller's loop
            with contextlib.suppress(RuntimeError):
                self._runner.loop = sys.modules["asyncio"].get_running_loop()
        if self._runner.loop is None and any(map(inspect.iscoroutinefunction, (self._runner.handler,
                                                                              self._runner.on_error))):
            raise TypeError("a coroutine handler needs an event loop: start the watcher inside one, or pass loop=")
        self._started = True
        os.makedirs(self.directory, exist_ok=True)
        if os.stat(self.directory).st_mode & stat.S_IWOTH:
            log.warning("events directory %s is writable by every user: anyone can act as the agent (chmod o-w %s)",
                        self.directory, self.directory)
        history = self._history_path and os.path.abspath(self._history_path)
        with contextlib.suppress(OSError):  # the history may lie here, under an event's name: never read as one
            if history and os.path.samefile(os.path.dirname(history), self.directory):
                self._scanner.ignore = os.path.basename(history)
        if self._lock.take():
            try:
                self._startup()
            except BaseException:  # the lock is let go: a start-up that failed holds nothing
                self._unlock()
                raise
        elif not (self.standby and thread):
            raise EventError(None, self._lock.holder())
        else:
            log.warning("%s; standing by", self._lock.holder())
            if self.systemd:
                _sd_notify("READY=1\nSTATUS=standing by")
        if thread:
            self._thread = threading.Thread(target=self._run, daemon=True, name="mom_events scheduler")
            self._thread.start()

    def step(self, now: float | None = None, scan: bool = True) -> float | None:
        """One turn of the scheduler, as ``sched.scheduler.run(blocking=False)``: look at the directory, fire
        what is due at ``now`` (default: the clock's).  Unlike ``sched``, it returns the absolute time (on the
        watcher's clock) when the next firing or retry is due, or None: sleep ``max(0, min(poll, due - clock()))``."""
        if self._lock.fd is None or self._stopping.is_set():
            return None
        now = self.clock() if now is None else now
        changes = list(self._scanner.poll()) if scan else []
        first = self._schedule.next_due()
        if self._beat(now) or changes or (first is not None and first <= now):
            if not self._still_ours():  # nothing fires once another harness holds the directory
                return None
            self._lock.mark_alive(now)  # before anything fires: what was due before it had fired
        for name, sig in changes:
            self._guarded(name, self._files.on_change, name, sig, now)
        for due, name in self._schedule.pop_due(now):
            self._guarded(name, self._files.on_due, due, name, now)
        self._channels.dispatch()
        return self._schedule.next_due()

    def _beat(self, now: float) -> bool:
        """Once a second (True): systemd's watchdog hears that this watcher lives, standing by or not."""
        if self._heartbeat <= now < self._heartbeat + _BEAT:
            return False
        self._heartbeat = now
        if self.systemd and os.environ.get("WATCHDOG_PID", str(os.getpid())) == str(os.getpid()):
            _sd_notify("WATCHDOG=1")
        return True

    def submit(self, channel_id: str, fn: Callable[[], Any]) -> bool:
        """Run ``fn()`` on the channel's queue, as a user's own message: refused (False) while it is busy, and
        unless the watcher runs (before start(), nothing runs in a directory another harness may hold)."""
        return self.running and self._channels.submit(channel_id, lambda: self._runner.call(fn))

    def stop(self, timeout: float = 30) -> list[str]:
        """Stop scheduling, drop what waits in the queues (their files stay), wait up to ``timeout`` for the
        running callbacks and return the channels still running then.  The lock is kept while they run."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.systemd:
            _sd_notify("STOPPING=1")
        for job in self._channels.close():
            if job.event is not None and not job.notice:  # a notice's record stays: it is told at the next start
                self._runner.history.record("cancelled", job.event, detail="the harness stopped before it ran")
        running = self._unlock(timeout)
        if running:
            threading.Thread(target=self._unlock, args=(None,), daemon=True).start()
        return running

    def __enter__(self) -> EventsWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> EventsWatcher:
        asyncio = sys.modules["asyncio"]
        self._runner.loop = self._runner.loop or asyncio.get_running_loop()
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await sys.modules["asyncio"].to_thread(self.stop)

    def _unlock(self, wait: float | None = 0.0) -> list[str]:
        """Let the lock go once the runs still going have ended (a standby must never run beside them), and
        return the channels still running after ``wait`` (None: as long as they run).  Until then, each
        second, the time is noted: an immediate written meanwhile was accepted, and runs at the next start."""
        deadline = math.inf if wait is None else time.monotonic() + wait
        while True:
            self._lock.note_held()
            running = self._channels.wait(max(0.0, min(_BEAT, deadline - time.monotonic())))
            if not running or time.monotonic() >= deadline:
                break
        if not running:
            self._scanner.close()
            self._lock.release()
        return running

    def _startup(self) -> None:
        """Act on what the last harness left, judged by when it was last alive (the lock file's mtime, kept as
        it was until this start-up is done: one killed before then does not count as a harness that ran) and
        when it let the directory go.  Nothing runs before the start-up is done."""
        assert self._lock.fd is not None
        os.makedirs(os.path.join(self.directory, _RECORDS), mode=0o700, exist_ok=True)
        held = _mtime(os.path.join(self.directory, _RECORDS, "held"))
        self._files.down = down = _Downtime(_last_alive(self._lock.fd), held, self.clock())
        if ahead := _ahead(down):
            log.warning("%s %s", self.directory, ahead)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.directory, _JOURNAL))
        self._channels.hold()
        try:
            self._notices.recover()
            for name, sig in self._scanner.poll():
                self._guarded(name, self._files.on_change, name, sig, down.start)
            self._lock.claim(down.start, down.alive)
        finally:
            self._files.down = None
        if self.systemd:
            _sd_notify("READY=1\nSTATUS=watching")
        self._channels.release()  # only now does anything run
        log.info("watching %s (%d events scheduled)", self.directory, len(self._schedule))

    def _run(self) -> None:
        while self._lock.fd is None and not self._stopping.wait(_STANDBY_TRY):
            self._beat(self.clock())
            try:
                if not self._lock.take():
                    continue
            except OSError:  # the directory is gone for now (made anew): it is tried again
                continue
            log.warning("%s: taking over", self.directory)
            try:
                self._startup()
            except Exception:
                log.exception("%s: the takeover failed; the directory is let go", self.directory)
                self._stopping.set()
                self._unlock()
                return
        try:
            while not self._stopping.is_set():
                due = self.step()
                delay = self.poll_interval if due is None else min(self.poll_interval, due - self.clock())
                time.sleep(max(0.0, delay))  # the cheapest wait: a timed wait on a lock costs half as much again
        except Exception:  # a bug: said with its traceback, and the watcher stops (``running``), never silently
            log.exception("%s: the scheduler failed; this watcher stops", self.directory)
            self._stopping.set()

    def _still_ours(self) -> bool:
        """Before anything fires: the directory made anew is locked again, or, held by another harness, this
        watcher stops."""
        if self._lock.ours():
            return True
        if self._stopping.is_set():  # stop() let it go (from another thread, as this step ran): not taken again
            return False
        try:
            locked = self._lock.take()
        except OSError:  # gone again as it was looked at: the next step looks again
            return False
        if locked:
            log.warning("%s was made anew: its lock is taken again", self.directory)
            os.makedirs(os.path.join(self.directory, _RECORDS), mode=0o700, exist_ok=True)
            return True
        log.error("%s, made anew: this watcher stops", self._lock.holder())
        self._stopping.set()
        return False

    def _guarded(self, name: str | None, fn: Callable[..., None], *args: Any) -> None:
        """One file's trouble is its own: an unexpected error is logged with its name and traceback, and the
        rest goes on."""
        try:
            fn(*args)
        except Exception:
            log.exception("%s: unexpected error", name or self.directory)


def _mtime(path: str | int) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _last_alive(lock: int | str) -> float | None:
    """When the last harness was last alive, by its lock file: None when unknown (no lock file, or an empty one:
    no harness was here, or its start-up was killed).  A time set is read back a few hundred ns off: 1 ms more."""
    try:
        st = os.stat(lock)
    except OSError:
        return None
    return st.st_mtime + 0.001 if st.st_size else None


def _ahead(down: _Downtime) -> str | None:
    """What a last sign of life ahead of the clock means (a clock stepped back, or the lock file was touched)."""
    if down.alive is None or down.alive <= down.start + _BEAT:
        return None
    return (f"was last alive {_duration(down.alive - down.start)} ahead of the clock: what fell due before "
            f"{datetime.fromtimestamp(down.alive).astimezone().isoformat(timespec='seconds')} counts as done, and "
            "periodic runs resume after it")


def _log_error(event: Event, exc: BaseException) -> None:
    log.error("%s: the handler failed: %s", event.filename, exc, exc_info=exc)


# --- The CLI: the agent's manual, the printer, --exec, --check and its agenda, main ---

_MANUAL = """\
## Scheduled events
To wake yourself up later, write an event, a small JSON file, into `{dir}/`: when it is due, a harness sends
you its `text` in its channel.{which}

### Time
Your user's timezone is {tz_text}: times they give without a zone are there, and so are "today" and "tomorrow".
This host's clock may be in another zone: get the time there with its offset: `{now}`. That offset is today's
(an hour off after a clock change): give events wall time and `timezone`.

### The three types
**immediate** runs when the harness sees it:
```json
{immediate}
```
**one-shot** runs once, at `at`: wall time in an IANA `timezone` (or with the UTC offset it has then):
```json
{one_shot}
```
A wall time the clocks skip (02:30 on a spring-forward night) runs when the gap ends (03:00), a repeated one on its
first pass; so do cron and `every`.

**periodic** runs until you delete the file: on a cron `schedule` in `timezone` (or a list of schedules: each
one's times), or `every` so long (`90m`, `2d`, `6w`); with `timezone`, whole days and weeks keep the wall
time, else it is elapsed time. Optional: `start` (none before it; `every` runs first then, else one interval after
the file is written or rewritten), `until` (a run at exactly `until` still happens; then the file is deleted), wall
times in `timezone` (else with offsets), and `catchUp` (below).
```json
{periodic}
```
```json
{listed}
```
```json
{every}
```

### Cron schedules
`minute hour day-of-month month day-of-week`, read in the event's `timezone`:
- `0 9 * * 1-5`: weekdays at 09:00; `30 14 * * 1`: Mondays at 14:30; `0 0 1 * *`: every 1st at 00:00
- `0 17 * * 5#L` (or `5L`): the last Friday of every month; `0 9 * * 5#2,5#4`: the 2nd and 4th Fridays
- `0 9 L * *`: the last day of every month; `LW`: its last weekday; `0 9 15W * *`: the weekday nearest the 15th

When both day fields are restricted, a day matching *either* runs: `0 17 22-31 * 5` runs from the 22nd *and* on
Fridays. A `+` before the day-of-week asks for both: `0 9 1-7 * +1` is the first Monday.
A step starts again every hour: `*/45 * * * *` runs at :00 and :45; use `every` for every
45 minutes, or a list for times no one schedule gives.

### Creating, checking, cancelling
Write a temporary name (one starting with `.` is ignored), check it, then `mv` it into place, so no half-written
file is read:
```bash
cat > {qdir}/.dentist.json.tmp <<'JSON'
{one_shot}
JSON
{check} {qdir}/.dentist.json.tmp --check && mv {qdir}/.dentist.json.tmp {qdir}/dentist.json
```
- A file's name is its identity; to change a file, write it again.
- List what is pending: `ls {qdir}/*.json` (immediate and one-shot files delete themselves when their run begins).
  Cancel: `rm {qdir}/dentist.json` (a run waiting its turn too).
- Check them all (next runs, daylight saving, faults): `{check} {qdir} --check`. If one fails, fix or `rm` it.
- The next 7 days' runs: `{check} {qdir} --check --next 7d`

### What you will receive
```
[EVENT:dentist.json:one-shot:{wall_at}] (due {at}) Dentist at 10:00: remind Mario
```
or `[EVENT:name.json:periodic:every 2w] (due ...) text`. `due` is the run's time with its offset: in the event's
`timezone`, else the offset its `at` was written with (an `every`: {tz}); `, late by 3 minutes` follows when late.
Write `text` as an instruction to your future self. Each channel runs one event at a time; 5 more may wait.
What does not run comes as a notice on its channel, `[EVENT:NAME.json:TYPE] why. It was: <the original>`:
- `rejected`: invalid (bad JSON, a misspelt field such as `catchup`, a bad schedule, a time already past), now
  `NAME.json.rejected`. Fix it, check it, then `mv {qdir}/NAME.json.rejected {qdir}/NAME.json` (or `rm` it).
- `missed`: a one-shot fell due while no harness ran, more than 5 s after the last one stopped (and beyond the
  operator's grace); deleted unrun. Tell the user; write it again if it still matters.
- `skipped`: a periodic run missed by more than its `catchUp`; the file stays. Without `catchUp`, missed periodic
  runs are skipped silently; `true` runs the latest once, late; `"12h"`, only if at most that late.
- `stale` (immediates written while no harness ran) and `discarded` (5 already waiting): deleted unrun, many in one.
- `interrupted`: the harness stopped during that run; its outcome is unknown: check before you repeat it.

A program that reports many things should append them to a file and write an event only when none is pending.
{history}"""

_HISTORY = """
### Did it run? The history
Every outcome is appended to `{history}`, one JSON object per line: `time`, `filename`, `type`, `channelId`,
`outcome` (`done`, `failed`, `missed`, `interrupted`, ...), `dueAt`, `detail` (why). One file's last lines:
```bash
grep -F '"filename": "dentist.json"' {qhistory} | tail -n 5
```
"""


def _host_timezone() -> str | None:
    """The host's IANA zone (TZ's, or /etc/localtime's link), the user's by default; None when they name none."""
    name = os.environ.get("TZ", "").removeprefix(":") or os.path.realpath("/etc/localtime")
    name = name.partition("/zoneinfo/")[2] or name
    with contextlib.suppress(ValueError):
        return _zone(name).key
    return None


def events_prompt(events_dir: str | os.PathLike[str], timezone: str | None = None, channel_id: str | None = None,
                  history: str | os.PathLike[str] | None = None) -> str:
    """The agent's manual, a Markdown section for its system prompt, for ``events_dir`` in the user's ``timezone``
    (default: the host's).  ValueError for an unknown zone or a ``channel_id`` no event file could name."""
    directory = os.fspath(events_dir).rstrip("/") or "/"
    name = timezone or _host_timezone()
    zone, tz = _zone(name or "UTC"), name or "UTC"
    tomorrow = datetime.now(zone).date() + timedelta(days=1)
    at = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 9, tzinfo=zone).isoformat()
    wall_at, until = f"{tomorrow.isoformat()}T09:00:00", f"{tomorrow.year + 1}-12-31T23:59:59"
    # the commands by absolute paths, to work from any directory (an embedded interpreter: the installed script)
    installed = os.path.basename(__file__) == "__init__.py"  # the package: run as a module, not its __init__.py
    script = "-m mom_events" if installed else shlex.quote(os.path.abspath(__file__))
    cli = f"{shlex.quote(sys.executable)} {script}" if sys.executable else "mom-events"

    def example(kind: str, text: str, **fields: object) -> str:
        return json.dumps({"type": kind, "channelId": "CHANNEL_ID" if channel_id is None else channel_id,
                           "text": text, **fields}, ensure_ascii=False)
    try:
        parse_event(example("immediate", "x"), "x.json")  # a channel no event could name is an error
    except EventError as exc:
        raise ValueError(f"channel ID {channel_id!r}: {exc.reason}") from None
    more = "" if history is None else _HISTORY.format(history=os.fspath(history),
                                                       qhistory=shlex.quote(os.fspath(history)))
    return _MANUAL.format(
        dir=directory, qdir=shlex.quote(directory), tz=tz, at=at, history=more,
        check=cli + (f" --timezone {shlex.quote(name)}" if name else ""),
        tz_text=name or f"UTC{datetime.now().astimezone().isoformat()[-6:]} (no IANA name is known)",
        now=f"TZ={shlex.quote(name)} date -Iseconds" if name else "date -Iseconds",
        which="" if channel_id else " Put the channel to wake you in into `channelId`.",
        immediate=example("immediate", "Issue #42 was opened"),
        one_shot=example("one-shot", "Dentist at 10:00: remind Mario", at=wall_at, timezone=tz),
        wall_at=wall_at,
        periodic=example("periodic", "Summarize the inbox", schedule="0 9 * * 1-5", timezone=tz,
                         until=until, catchUp="12h"),
        listed=example("periodic", "Water the plants", schedule=["0 8 * * 1-5", "0 10 * * 0,6"], timezone=tz),
        every=example("periodic", "Post the sprint report", every="2w", start=f"{tomorrow}T10:00:00", timezone=tz))


def _one_line(text: str) -> str:
    """Each non-printing character (newline, ESC, U+2028, a lone surrogate) as repr shows it: no line of its own."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


class _OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _one_line(super().format(record))


class _CutShort(BaseException):
    """A command the harness's own shutdown stopped: a BaseException, so its run ends cut short (its record
    stays, and the next start tells it interrupted)."""


class _Handler:
    """The CLI's handler: a flushed line per event on stdout, escaped (JSON escapes by itself); with --exec, then
    ``/bin/sh -c CMD`` in a session of its own, the event on stdin and in MOM_EVENT_* (never in its arguments), its
    output on stderr; a failure raises ChildProcessError, logged in one line with no traceback."""

    def __init__(self, as_json: bool, command: str | None, timeout: float | None, directory: str | None = None) -> None:
        self.as_json = as_json
        self.command = command
        self.timeout = timeout
        self.directory = directory  # the watched one: each command's session goes into its run's crash record
        self.lock = threading.RLock()  # to start a command (stop_all sees all); a signal may re-enter it
        self.printing = threading.Lock()  # a line at a time; never held by stop_all, as a blocked write may hold it
        self.running: dict[str, tuple[int, int]] = {}  # run id -> its session: (sid, the leader's start)
        self.stopping = False
        self.unwritten = False  # stdout failed: said once until it works again

    def __call__(self, event: Event) -> None:
        fired = datetime.now().astimezone().isoformat(timespec="milliseconds")
        if self.as_json:
            line = json.dumps({
                "firedAt": fired, "filename": event.filename, "type": event.type, "channelId": event.channel_id,
                "text": event.text, "message": event.message, "at": event.at, "schedule": event.schedule,
                "timezone": event.timezone, "late": event.late, "dueAt": event.due and event.due.isoformat()})
        else:  # a ] in the name too: the [EVENT:...] tag ends at its first ]
            tagged = replace(event, filename=event.filename.replace("]", r"\x5d"))
            line = f"{fired} {_one_line(event.channel_id)} {_one_line(tagged.message)}"
        with self.printing:
            try:
                sys.stdout.write(line + "\n")  # one write: a line is whole even if the harness is killed
                sys.stdout.flush()
                if self.unwritten:
                    log.warning("the output can be written again")
                self.unwritten = False
            except OSError as exc:  # a full disk: said once till it works again, and the command runs all the same
                if not self.unwritten:
                    log.error("the output cannot be written: %s", exc.strerror or exc)
                self.unwritten = True
        if self.command is not None:
            self._run(self.command, event)

    def _run(self, command: str, event: Event) -> None:
        run_id = event.run_id or os.urandom(8).hex()  # a handler called outside a watcher's run has no id
        env = {**os.environb, b"MOM_EVENT_RUN": run_id.encode()}
        when = _when(event) or event.type
        fields = {"FILE": event.filename, "TYPE": event.type, "CHANNEL": event.channel_id, "TEXT": event.text,
                  "MESSAGE": event.message, "SCHEDULE": when, "DUE": event.due.isoformat() if event.due else ""}
        for key, value in fields.items():  # a lone surrogate (JSON allows "\ud800") spelt out, as UTF-8 cannot hold it
            data = value.encode("utf-8", "backslashreplace").replace(b"\0", b"\\0")
            if len(data) > 1 << 16:  # cut at a character (stdin has it whole); Linux takes 128 KiB a variable
                marker = f" [cut: {len(data)} bytes in all; the whole message is on stdin]".encode()
                data = data[:(1 << 16) - len(marker)].decode(errors="ignore").encode() + marker
            env[f"MOM_EVENT_{key}".encode()] = data
        with self.lock:
            if self.stopping:
                raise _CutShort("command not started: the harness is stopping")
            try:
                proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=2,
                                        env=env, start_new_session=True)
            except OSError as exc:
                raise ChildProcessError(f"command failed: cannot start it: {exc.strerror or exc}") from None
            leader = _proc_session(proc.pid, dead=True)  # not reaped yet: there even if it has ended (no /proc: none)
            self.running[run_id] = session = (proc.pid, leader[1] if leader else sys.maxsize)
        failure = None
        try:
            if self.directory is not None and event.run_id:  # a successor stops it by its session too
                _note_session(self.directory, event.run_id, event.filename, *session)
            message = (event.message + "\n").encode("utf-8", "backslashreplace")
            threading.Thread(target=self._feed, args=(proc.stdin, message), daemon=True).start()
            proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            failure = f"timed out after {self.timeout:g} s"
        finally:
            _stop_run(run_id, sessions=[session])  # which ends a helper holding stdin, and so the writer
            status = proc.wait()
            del self.running[run_id]
        if status and self.stopping:
            raise _CutShort("command stopped at shutdown")
        if status and not failure:
            names = {int(signo): signo.name for signo in signal.Signals}
            failure = f"exit status {status}" if status > 0 else f"killed by {names.get(-status, f'signal {-status}')}"
        if failure:
            raise ChildProcessError(f"command failed: {failure}")

    @staticmethod
    def _feed(pipe: io.BufferedWriter, data: bytes) -> None:
        """stdin, written on a thread of its own: a helper that keeps it open never holds the run's end."""
        with contextlib.suppress(BrokenPipeError), pipe:  # the command need not read it all
            pipe.write(data)

    def stop_all(self, kill: bool = False) -> None:
        """Start no run and stop all that run: the grace ran out, or (``kill``: SIGKILL at once) a second signal."""
        self.stopping = True
        with self.lock:  # a command being started is in self.running after this
            runs = dict(self.running)
        _stop_run(*runs, sessions=runs.values(), wait=0 if kill else 1.0)


_AGENDA_MOST = 10_000  # runs an agenda shows: a span of a file every second is 604,800 a week
_Agenda = list[tuple[Iterator[float], str]]  # each file's runs, and what it is


def _check_file(path: str, name: str, now: float, zone: tzinfo, agenda: _Agenda,
                down: _Downtime | None = None, grace: float = 0.0) -> tuple[bool, str]:
    """Whether a file will run, judged as a harness seeing it now would, and when (its runs into agenda) or why not."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return False, "ignored: not a regular file"
        with open(path, "rb") as file:  # a draft of any name is parsed as an event
            event, parsed, unknown = _parse(file.read(MAX_FILE_BYTES + 1),
                                            name if name.endswith(".json") else "draft.json")
    except EventError as exc:
        return False, exc.reason
    except OSError as exc:
        return False, f"cannot be read: {exc.strerror or exc}"
    timing = _timing(parsed, min(info.st_mtime, now), zone)  # ahead of the clock: now, as a harness would set it
    entered = info.st_ctime if timing is None else info.st_mtime  # an immediate: when it entered the directory
    verdict = _judge(event, min(entered, now), now, timing, down, grace)
    what = f"{event.type} on channel {event.channel_id}"
    notes = [f"unknown fields are ignored: {', '.join(map(json.dumps, unknown))}"] if unknown else []
    if verdict.outcome not in (_Outcome.RUN, _Outcome.SCHEDULE):
        return False, "; ".join([f"{what}: {verdict.reason}", "it will not run", *notes])
    if timing is None:
        return True, "; ".join([f"ok: {what}, runs on arrival", *notes])
    late = verdict.outcome is _Outcome.RUN
    first = verdict.next_due if late else verdict.due
    said = [what, f"runs at once, late by {_duration(now - (verdict.due or now))}"] if late else [what]
    if event.at is not None and first is not None:
        said.append(f"at {_shown(first, now, zone, timing.zone)}")
        mine, written = datetime.fromtimestamp(first, zone), datetime.fromtimestamp(first, timing.zone)
        if event.timezone is None and written.utcoffset() != mine.utcoffset():  # a date past a clock change
            offsets = (written.isoformat(timespec="seconds")[19:], mine.isoformat(timespec="seconds")[19:])
            notes.append(f"the offset {offsets[0]} is not {zone}'s on {mine.date()} ({offsets[1]}): runs at "
                         f"{mine.strftime('%H:%M:%S').removesuffix(':00')} there")
    elif event.at is None:  # a periodic event: its schedule, its flags in words, its next three runs
        said.append(f"{_when(event)}" + (f" in {event.timezone}" if event.timezone else ""))
        for word, key, when in (("from", "start", timing.start), ("until", "until", timing.until)):
            if math.isfinite(when):
                said.append(f"{word} {_shown(when, None, zone, timing.zone, key)}")
        if (reach := timing.catch_up) is not None:
            within = "" if math.isinf(reach) else f" at most {_duration(reach)} late"
            said.append(f"catches up one missed run{within} (catchUp)")
        runs = enumerate(itertools.islice(_runs(timing, first), 3))
        said[-1] += f"; next {', '.join(_shown(when, None if k else now, zone, timing.zone) for k, when in runs)}"
    agenda.append((itertools.chain([now] if late else [], _runs(timing, first)),
                   f"{name}, {what}: {_excerpt(event.text, 59)}"))
    return True, "; ".join([f"ok: {', '.join(said)}", *notes, *timing.notes(now)])


def _runs(timing: _Timing, due: float | None) -> Iterator[float]:
    while due is not None and due <= _LAST_RUN:  # every zone can show it
        yield due
        due = timing.next_after(due)


def _shown(when: float, now: float | None, zone: tzinfo, own: tzinfo | None = None, *remarks: str | None) -> str:
    """An instant in the user's ``zone``, the event's ``own`` clock beside where it differs, how far from ``now``."""
    mine = datetime.fromtimestamp(when, zone)
    there = datetime.fromtimestamp(when, own or zone)
    day = "" if there.date() == mine.date() else f"{there.date()} "
    clock = there.strftime("%H:%M:%S" if there.second else "%H:%M")
    beside = f"{day}{clock} in {own}" if there.utcoffset() != mine.utcoffset() else None
    away = None if now is None else "now" if when <= now else f"in {_duration(round(when - now))}"
    said = ", ".join(remark for remark in (beside, away, *remarks) if remark)
    return mine.isoformat(timespec="seconds") + (f" ({said})" if said else "")


def _agenda(agenda: _Agenda, upcoming: tuple[int, float], now: float, zone: tzinfo) -> list[str]:
    """--check --next: the runs of every file in time order, under a head line; each walked only as far as shown."""
    most, span = upcoming
    merged = heapq.merge(*(zip(runs, itertools.repeat(label)) for runs, label in agenda))
    shown = list(itertools.islice(itertools.takewhile(lambda run: run[0] <= now + span, merged), most + 1))
    count, within = min(len(shown), most), "" if math.isinf(span) else f" in the next {_duration(span)}"
    runs = f"{count} run{'s' if count > 1 else ''}"
    if not count:
        head = f"no runs{within or ' are left'}"
    elif within:
        head = f"the first {runs}{within} (there are more):" if len(shown) > most else f"runs{within}:"
    else:
        head = f"next {runs}:" if count == most else f"only {runs} left:"
    return [head] + [f"{_shown(due, now, zone)} {label}" for due, label in shown[:count]]


def _check(path: str, history: str | None, timezone: str | None, upcoming: tuple[int, float] | None,
           grace: float = 0.0) -> int:
    """--check: a line per file of a directory (or one draft of any name), the agenda, a sum; 0 if all will run."""
    skip = os.path.realpath(history) if history else None  # the watcher never reads its history as an event
    try:
        files = [(path, os.path.basename(path))] if not os.path.isdir(path) and os.stat(path) else [
            (os.path.join(path, name), name) for name in sorted(os.listdir(path))
            if _is_event_name(name.removesuffix(".rejected")) and os.path.realpath(os.path.join(path, name)) != skip]
    except OSError as exc:
        log.error("cannot check %s: %s", path, exc.strerror or exc)
        return 1
    user = timezone or _host_timezone()  # else the host's offset
    zone, now = _zone(user) if user else datetime.now().astimezone().tzinfo or UTC, time.time()
    agenda: _Agenda = []
    out, bad = [], 0
    alive = _last_alive(os.path.join(path, _LOCK))
    # judged as a running harness sees it (its lock file is fresh, or one draft), else as a start-up now would
    fresh = files and files[0][0] == path or alive is not None and -_BEAT <= now - alive <= 3 * _BEAT
    down = None if fresh else _Downtime(alive, _mtime(os.path.join(path, _RECORDS, "held")), now)
    out += [f"{path} {ahead}"] if down and (ahead := _ahead(down)) else []
    for file, name in files:
        original = name.removesuffix(".rejected") if file != path else name  # judged again as NAME.json
        ok, said = _check_file(file, original, now, zone, agenda if original == name else [], down, grace)
        if original != name:
            said = (f"rejected, valid now ({said.removeprefix('ok: ')}): mv it back to {original}" if ok
                    else f"rejected: {said}; fix it, then mv it back to {original} (or rm it)")
        bad += not ok or original != name
        out.append(f"{name}: {said}")
    out += _agenda(agenda, upcoming, now, zone) if upcoming else []
    out.append(f"checked {path}: {len(files) - bad} will run, {bad} will not")
    try:
        print("\n".join(map(_one_line, out)), flush=True)
    except BrokenPipeError:  # | head: its reader has what it wanted; nothing to flush at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if bad else 0


def _number(text: str, positive: bool = False) -> float:
    """A number of seconds (or a count): finite, not negative, and above 0 if ``positive``."""
    with contextlib.suppress(ValueError):
        if math.isfinite(value := float(text)) and value >= 0 and (value > 0 or not positive):
            return value
    raise argparse.ArgumentTypeError(f"must be a {'positive' if positive else 'non-negative'} number: {text!r}")


def _upcoming(text: str) -> tuple[int, float]:
    """--next: a count of runs, or a span as ``every`` reads one (7d, 36h): (at most so many runs, within so long)."""
    if text.isascii() and text.isdigit() and len(text) <= 6 and 0 < int(text) <= _AGENDA_MOST:
        return int(text), math.inf
    with contextlib.suppress(ValueError):
        return _AGENDA_MOST, float(_seconds(text))
    raise argparse.ArgumentTypeError(f"not a count of runs (1 to {_AGENDA_MOST}) nor a span such as 7d: {text!r}")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mom_events", description="Print each event file of DIR when it is due.")
    add, seconds = parser.add_argument, (lambda text: _number(text, positive=True))
    add("dir", nargs="?", default="events", help="the events directory (default: events); --check: or a file")
    add("--json", action="store_true", help="print one JSON object per event instead of a text line")
    add("--poll", type=seconds, default=0.04, metavar="S", help="seconds between looks at DIR (default: 0.04)")
    add("--exec", metavar="CMD", help="run /bin/sh -c CMD per event: the message on stdin, the event in MOM_EVENT_*")
    add("--exec-timeout", type=seconds, metavar="S", help="stop a command (all it started) running longer")
    add("--grace", type=_number, default=30.0, metavar="S", help="on SIGTERM/SIGINT, the time to finish (30)")
    add("--misfire-grace", type=_number, default=0.0, metavar="S",
        help="at start, what fell due while none ran runs late if at most S late (always within 5 s of its end)")
    add("--max-queued", type=lambda text: int(_number(text)), default=5, metavar="N", help="events waiting a channel")
    add("--history", metavar="PATH", help="append one JSON line per outcome to PATH (--prompt: teach it)")
    add("--standby", action="store_true", help="when another harness watches DIR, wait and take over")
    add("--no-notify", dest="notify", action="store_false",
        help="tell no rejected, missed, skipped, stale or discarded notice (interrupted is always told)")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--check", action="store_true", help="judge DIR's files (or one file) and exit 0 if all run")
    modes.add_argument("--prompt", action="store_true", help="print the agent's manual for DIR")
    add("--next", type=_upcoming, metavar="N|SPAN", help="with --check: the next N runs, or those within SPAN")
    add("--channel", metavar="ID", help="with --prompt: the channel in the examples")
    add("--timezone", metavar="TZ", help="the user's IANA timezone (default: the host's)")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    noise.add_argument("-q", "--quiet", action="store_true", help="log only warnings and errors")
    add("--version", action="version", version=f"mom_events {__version__}")
    args = parser.parse_args(argv)
    for given, value, needs, ok in (("--exec-timeout", args.exec_timeout, "needs --exec", args.exec),
                                    ("--next", args.next, "goes with --check", args.check),
                                    ("--channel", args.channel, "goes with --prompt", args.prompt)):
        if value is not None and not ok:
            parser.error(f"{given} {needs}")
    try:
        events_prompt(args.dir, args.timezone or "UTC", args.channel)  # the zone and the channel are ones it takes
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    """The CLI: serve DIR, --check it, or print its --prompt; the exit status."""
    args = _arguments(argv)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level="DEBUG" if args.verbose else "WARNING" if args.quiet else "INFO", handlers=[stderr])
    if isinstance(sys.stdout, io.TextIOWrapper):  # it is, unless an embedding program replaced it
        sys.stdout.reconfigure(errors="backslashreplace")  # names need not be valid UTF-8
    if args.prompt:
        history = args.history and os.path.abspath(args.history)
        sys.stdout.write(events_prompt(os.path.abspath(args.dir), args.timezone, args.channel, history))
        return 0
    if args.check:
        return _check(args.dir, args.history, args.timezone, args.next, args.misfire_grace)
    status = _serve(args)
    log.info("stopped (exit status %d)", status)  # the operator sees the end
    return status


def _serve(args: argparse.Namespace) -> int:
    """Watch until SIGTERM/SIGINT: 0 if the runs end within the grace, else 1; a second signal leaves at once."""
    stop = threading.Event()
    handler = _Handler(args.json, args.exec, args.exec_timeout, args.dir)

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():  # nothing of a run outlives the harness
            handler.stop_all(kill=True)
            said = f"{datetime.now():%Y-%m-%d %H:%M:%S} WARNING stopped at once on a second signal (exit status "
            with contextlib.suppress(OSError):  # never waiting on a stderr no one reads, as a log line would
                os.set_blocking(2, False)
                os.write(2, f"{said}{128 + signum})\n".encode())
            os._exit(128 + signum)
        stop.set()

    def report(event: Event, exc: BaseException) -> None:  # a failed command is one line, anything else a traceback
        log.error("%s: %s", event.filename, exc, exc_info=None if isinstance(exc, ChildProcessError) else exc)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        watcher = EventsWatcher(args.dir, handler, on_error=report, poll_interval=args.poll,
                                max_queued=args.max_queued, history=args.history, misfire_grace=args.misfire_grace,
                                standby=args.standby, notify=args.notify, systemd=True, timezone=args.timezone)
        watcher.start()
    except (ValueError, OSError) as exc:  # EventError: already watched
        log.error("cannot watch %s: %s", args.dir, getattr(exc, "strerror", None) or exc)
        return 2
    # Python runs a signal's handler only when the main thread runs Python code: it waits in short steps, and the
    # watcher stops on a thread of its own, to hear a second signal even when the kernel gives it elsewhere.
    while not stop.wait(0.2):
        if not watcher.running:  # it stopped by itself (a failed takeover, the directory lost): it said why
            watcher.stop(timeout=args.grace)
            return 1
    log.info("stopping; running events have %g s to finish", args.grace)
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(watcher.stop, timeout=args.grace)
        while not wait([done], 0.2).done:
            pass
    if not (still_running := done.result()):
        return 0
    log.warning("grace period over; stopping what still runs on channels %s", ", ".join(still_running))
    handler.stop_all()  # a second signal may come meanwhile: it kills them at once
    return 1


if __name__ == "__main__":
    sys.exit(main())
