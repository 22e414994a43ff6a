"""Mutation testing for mom_events: do the tests look where the bugs live?

Each mutant is mom_events.py with one small change (a comparison flipped, a
constant off by one, a statement deleted, a value no longer returned...),
made with ``ast`` inside a function body.  The mutant is assigned to a *part*
of the module (the section banner it sits under; the watcher's class apart
from the files') and run against the test classes that cover that part, in a
subprocess, failing fast, with a time limit (a timeout counts as killed:
the tests noticed).  A mutant the tests pass *survived*.  A few mutants can
never be noticed, since they change nothing that anything can observe: they
are listed in EQUIVALENT with the reason, and left out of the score.

Standard library only.  Run from the project directory, in its virtual
environment (the tests need croniter)::

    python benchmarks/mutate.py                      # every mutant: hours
    python benchmarks/mutate.py --part schedule      # one part
    python benchmarks/mutate.py --sample 300 --seed 1 --list-survivors
    python benchmarks/mutate.py --list               # the mutants, not run

It is a tool to run, not part of CI's time.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "mom_events.py"
TESTS = ROOT / "test_mom_events.py"

# Section banners of mom_events.py (the first line of the banner's text,
# as far as it identifies it) -> part.  A definition belongs to the last
# banner above it.
SECTIONS = {
    "Data model and parsing": "parsing",
    "Schedule arithmetic": "cron",
    "Judging": "judge",
    "Directory scanning": "scan",
    "One harness per directory": "scanner",
    "The schedule": "schedule",
    "Channel queues": "channels",
    "The history": "history",
    "The watcher": "files",
    "The agent's manual": "prompt",
    "The command line": "cli",
}
# Definitions that form a part of their own within a section.
OWN_PART = {"EventsWatcher": "watcher"}

# Part -> the test classes that cover it (the full suite is far too slow to
# run per mutant).  Each list is in the order to run: quick, likely killers
# first, since a mutant run stops at the first failure.
_WATCHER = ["StartupTest", "OneShotTest", "PeriodicTest", "ScanTest", "ChangeTest", "RetryTest",
            "IsolationTest", "NamesAndKindsTest", "QueueTest", "CallbackTest", "SubmitTest",
            "ClockStepTest", "HeapTest", "MisfireGraceTest", "ActOnWhatWasJudgedTest"]
COVERING = {
    "parsing": ["ParseEventTest", "FuzzTest", "LengthLimitTest", "OneLineOutputTest", "RejectedInProcessTest",
                "StartupTest", "OneShotTest", "JudgeAgreementTest", "LanguageTest"],
    "cron": ["CronTest", "DaylightSavingTest", "CronDialectTest", "CronReferenceTest", "PeriodicTest",
             "WeekdayRangeTest", "LanguageTest"],
    "judge": ["StartupTest", "OneShotTest", "PeriodicTest", "MisfireGraceTest", "JudgeAgreementTest",
              "RejectedInProcessTest", "DowntimeTest", "LanguageTest", "JudgeEdgeTest"],
    "scan": ["ScannerPartTest", "ScanTest", "ChangeTest", "NamesAndKindsTest", "StartupTest", "MidWriteTest",
             "RetryTest", "ActOnWhatWasJudgedTest", "CrashTest"],
    "scanner": ["ScannerPartTest", "ScanTest", "ChangeTest", "NamesAndKindsTest", "StartupTest", "MidWriteTest",
                "RetryTest", "LifecycleTest", "EndToEndTest", "DirectoryLockTest", "CrashTest", "JournalAccountTest",
                "DowntimeTest"],
    "schedule": ["SchedulePartTest", "ScheduleContractTest", "HeapTest", "OneShotTest", "PeriodicTest",
                 "ClockStepTest", "ChangeTest", "RetryTest", "StartupTest", "RealSchedulerTest"],
    "channels": ["ChannelsPartTest", "WorkerPoolTest", "RealSchedulerTest", "QueueTest", "CallbackTest",
                 "SubmitTest", "IsolationTest", "AsyncTest", "StoppedLoopTest", "LifecycleTest", "EndToEndTest",
                 "ChannelsReportTest", "CallbackFaultTest"],
    "history": ["HistoryEdgeTest", "HistoryTest", "HistoryShortWriteTest", "HistoryWholeLinesTest",
                "RejectedInProcessTest", "OneLineOutputTest"],
    "files": _WATCHER + ["FaultTest", "CallbackFaultTest", "RejectedInProcessTest", "HistoryTest", "DowntimeTest",
                         "LanguageTest", "ActOnWhatWasJudgedTest", "MidWriteTest"],
    "watcher": ["RealSchedulerTest", "StartupTest", "OneShotTest", "SubmitTest", "ClockStepTest",
                "EndToEndTest", "LifecycleTest", "StoppedLoopTest", "AsyncTest", "StandbyTest", "StepTest",
                "DirectoryLockTest", "FaultTest", "CrashTest"],
    "prompt": ["PromptTest", "RecipeTest", "DocumentedSignatureTest"],
    "cli": ["CliTest", "ExecTest", "SupervisionTest", "ExecEnvironmentTest", "CheckTest", "RejectedTest",
            "OneLineOutputTest", "ShutdownTest", "LockTest", "StandbyTest"],
}

# Mutants that no test can kill, because the behaviour cannot differ: the id
# (part:function:operator:code => change, #n for the n-th same change in the
# function; --list prints them) and why.  Left out of the score, and listed by --list-survivors.
_LONG_NUMBER = ("every field's bounds and step sizes are far below 10^8: a long number read as any of these "
                "is out of range or too large a step all the same")
_BACK_SEARCH = ("the back-search only saves time: without it (or with another step) the walk forward from "
                "the 100th occurrence finds the same latest one")
_LAST_RUN_SEARCH = ("the back-search from until only saves time: with another first step or factor the walk "
                    "forward finds the same last run")
_SWEEP_SHORTCUT = ("the sweep's shortcut: without it the name gets the full stat and comparison, with the "
                   "same entry (a stat a moment later at worst)")
_SWEEP_PACE = ("the sweep's pace only: it then stats its batch on other ticks, finding rewrites as soon or "
               "sooner at more cost (the idle benchmark measures the cost)")
_GIL_OFFER = "offering the GIL every batch only lets workers run sooner in a burst: the same events, the same order"
_LATE_SUPERVISOR = ("a safety net no test reaches: by the end of stop()'s _KILL_AFTER + _KILL_WAIT + 1 s each "
                    "supervisor has ended its run or given up on it, and left the table kill_all reads")
_LOCK_READ = ("the lock file holds a PID line and at most two short lines: reading 255 or 257 bytes, or "
              "from its second byte, finds the same lines after the PID")
EQUIVALENT = {
    "schedule:_Schedule.notice_clock_step:compare:drift > 0 => Gt->GtE":
        "differs only at drift 0, which is never logged (abs(drift) > 1.0 first)",
    "schedule:_Schedule.notice_clock_step:number:drift > 0 => 0->1":
        "a logged drift is above 1 or below -1, so > 1 and > 0 say the same of it",
    "schedule:_Schedule.notice_clock_step:number:drift > 0 => 0->-1":
        "a logged drift is above 1 or below -1, so > -1 and > 0 say the same of it",
    "schedule:_spin_until:compare:time.monotonic() < give_up => Lt->LtE":
        "one more reading of a clock that never stands still; the spin gives up all the same",
    "channels:_start_thread:delete:return thread => pass":
        "what _spawn returns is never used (tests' stand-ins return what they like)",
    "channels:_start_thread:return:return thread => None":
        "what _spawn returns is never used",
    "channels:_Channels.close:delete:self._ready.clear() => pass":
        "after close every worker leaves on _closed and _staff returns at once: the ready queue is never read",
    "channels:_Channels.close:delete:self._retire(channel) => pass":
        "a closed pool's empty channel answers waiting()/running() as an absent one; it is never used again",
    "channels:_Channels.close:delete:channel.ready = False => pass":
        "the ready flag only stops _kick (which returns on _closed anyway) and _retire (see above)",
    "channels:_Channels.close:bool:channel.ready = False => False->True":
        "the same as leaving the flag as it was",
    "channels:_Channels.wait:compare:remaining <= 0 => LtE->Lt":
        "differs only at exactly 0 left: Condition.wait(0) returns at once and the next pass returns",
    "channels:_Channels._staff:boolop:not self._ready or self._closed => Or->And":
        "the same guard, weakened: as harmless as deleting it (see above)",
    "channels:_Channels._staff:boolop:self._starting or len(self._busy_since) < self._workers => Or->And":
        "a starting worker is not busy, so while one starts busy < workers holds: 'and' says what 'or' does",
    "channels:_Channels._work_loop:delete:self._done.notify_all() => pass":
        "a worker going changes nothing wait() looks at (the channels running); the run's end notified already",
    "channels:_Channels._wait_for_work:return:return False => None":
        "its caller's while tests it for truth only",
    "channels:_Channels._wait_for_work:return:return False => None#2":
        "its caller's while tests it for truth only",
    "channels:_Channels._wait_for_work:compare:now >= deadline => GtE->Gt":
        "differs only when the monotonic clock reads exactly the deadline",
    "channels:_Channels._wait_for_work:compare:self._linger <= 0 => LtE->Lt":
        "a linger of 0 then sets a deadline of now, which returns False the same",
    "channels:_Channels._wait_for_work:number:self._linger <= 0 => 0->-1":
        "the same: a linger of 0 meets its deadline at once; nothing sets a negative one",
    "scanner:_Hold.wait:compare:silent > _HUNG => Gt->GtE":
        "differs only when a holder's silence is exactly _HUNG seconds, to the float",
    "scanner:_Hold.wait:compare:silent > _HUNG => Gt->GtE#2":
        "differs only when a holder's silence is exactly _HUNG seconds, to the float",
    "scanner:_Journal.__init__:number:int.from_bytes(os.urandom(7), 'big') >> 4 => 4->5":
        "51 random bits instead of 52: its ids are still its own, and exact in JSON",
    "scanner:_last_beat:delete:return None => pass":
        "pread and fstat of a descriptor this harness holds open do not fail",
    "scanner:_last_beat:return:return None => 0":
        "pread and fstat of a descriptor this harness holds open do not fail",
    "scanner:_last_beat:number:os.pread(fd, 256, 0) => 256->257":
        "a lock file is a PID and two short lines, far shorter",
    "scanner:_Journal._own:delete:return None => pass#3":
        "the function then ends, returning None all the same",
    "scanner:_Hold.wait:delete:return None => pass":
        "the function then ends, returning None all the same",
    "scanner:_Hold.wait:return:return None => 0":
        "_stand_by looks at the stop flag before the trace, and only a stop ends the loop",
    "scanner:_Hold.again:bool:clean=False => False->True":
        "the old lock file went with its directory: the clean stop it would then say is read by no one",
    "scanner:_Hold.__init__:number:self._next_beat = 0.0 => 0.0->1.0":
        "the monotonic clock is past a second from boot on: the first beat comes at once either way",
    "scanner:_Journal.compact:compare:self._size > _JOURNAL_COMPACT => Gt->GtE":
        "differs only when the journal is exactly _JOURNAL_COMPACT bytes long",
    "channels:_Loop.closed:bool:return True => True->False":
        "lost() halts the watcher (sets _stopping), so the while ends after this pass, whose tick can queue "
        "nothing (the pool is closed)",
    "channels:_Loop.call:return:return result => None":
        "every caller ignores what a callback returns",
    "watcher:EventsWatcher._run:delete:continue => pass":
        "after the spin, the rest of the pass computes a negative timeout and skips the sleep: the same",
    "watcher:EventsWatcher._run:compare:timeout > 0 => Gt->GtE":
        "time.sleep(0) instead of no sleep",
    "watcher:EventsWatcher._run:compare:mono >= next_poll => GtE->Gt":
        "differs only when the monotonic clock reads exactly the poll time",
    "history:_iso:delete:continue => pass":
        "the last statement of the except, inside the loop: the loop goes on all the same",
    "history:_last_outcomes:delete:continue => pass":
        "the last statement of the except, inside the loop: the loop goes on all the same",
    "watcher:EventsWatcher.__init__:delete:self._first_look: _Startup | None = None => pass":
        "_startup sets it before the first _poll reads it",
    "watcher:EventsWatcher.__init__:delete:self._looked_at: float | None = None => pass":
        "read only once a look has failed and come back, and the look before that (a good one) set it",
    "watcher:EventsWatcher.stop:number:2 * _NAP => 2->3":
        "join returns when the closer ends, which takes at most a nap: a longer bound waits no longer",
    "watcher:EventsWatcher.stop:number:2 * _NAP => 2->1":
        "a margin: the closer ends one nap and a few microseconds after stop() at worst; the race is "
        "too narrow for a test to pin without hooking time.sleep (LifecycleTest pins the usual case)",
    "watcher:EventsWatcher._startup:delete:self._files.schedule.notice_clock_step(now, tim... => pass":
        "a margin: the loop's first pass sets the clock's baseline a poll later; a step inside that first "
        "interval goes unlogged (it changes no firing: due times are wall-clock instants)",
    "watcher:EventsWatcher._run:delete:timeout = next_poll - mono => pass":
        "a margin: the nap then lasts a whole interval from the tick's end, not its start; polls drift by "
        "a tick's own duration (microseconds when idle), below what a test on a shared machine can see",
    "watcher:EventsWatcher._run:delete:break => pass":
        "lost_loop halts the watcher (sets _stopping), so the while ends after this pass, whose tick can "
        "queue nothing (the pool is closed)",
    "watcher:EventsWatcher._run:delete:self._channels.stand_by() => pass":
        "a margin: the worker is then started as the event fires, a thread start (about 0.1 ms) later",
    "watcher:EventsWatcher._run:delete:_spin_until(self._clock, due, time.monotonic() ... => pass":
        "the continue then makes the loop's own passes spin until the due time: the same firing",
    "scanner:_Hold.keep_alive:compare:mono >= self._next_beat => GtE->Gt":
        "differs only when the monotonic clock reads exactly the beat time",
    "watcher:EventsWatcher._run:compare:until_due < _LEAD => Lt->LtE":
        "differs only when the clock reads exactly a millisecond before the due time",
    "watcher:EventsWatcher._run:compare:action == 'fire' => Eq->NotEq":
        "a firing is then not spun for but reached by passes that skip the sleep (a negative timeout); a "
        "re-read is spun for instead of slept for: the same instants, a millisecond of CPU",
    "watcher:EventsWatcher._run:number:2 * _LEAD => 2->3":
        "the spin's give-up bound matters only if the wall clock steps back within its millisecond",
    "watcher:EventsWatcher._run:number:2 * _LEAD => 2->1":
        "the spin's give-up bound matters only if the wall clock steps back within its millisecond",
    "channels:_Channels.staff:delete:if not self._ready: return => pass":
        "the guard only spares the idle tick a lock: _staff returns at once when nothing is ready",
    "channels:_Channels._staff:delete:return => pass#2":
        "with a worker idle, busy < workers: the next test returns all the same",
    "channels:_Channels._wait_to_start:compare:delay <= 0 => LtE->Lt":
        "differs only when the monotonic clock reads exactly the end of the wait (then it sleeps 0 s)",
    "prompt:_host_timezone:delete:return None => pass":
        "the last statement: without it the function returns None all the same",
    "prompt:_host_timezone:boolop:name and (not name.startswith('/')) => And->Or":
        "_zone rejects an empty or absolute name as unknown (a _CronError), and the loop goes on the same",
    "prompt:_host_timezone:delete:continue => pass":
        "the last statement of the except, inside the loop: the loop goes on all the same",
    "parsing:_parse_instant:boolop:when.tzinfo is None or when.utcoffset() is None => Or->And":
        "fromisoformat gives a fixed offset or no tzinfo: utcoffset() is None exactly when tzinfo is",
    "cron:_Periodic._next:delete:raise NotImplementedError => pass":
        "each kind of periodic timing has its own; the raise is there for the type checker",
    "cron:_cron_notes:compare:after > before => Gt->GtE":
        "a transition is a change of offset: after never equals before",
    "cron:_cron_notes:compare:after > before => Gt->GtE#2":
        "the same",
    "cron:_OnCron.note:compare:since <= moment <= self.until => LtE->Lt":
        "a change of offset at the very instant checked: the note of a change that happens as it is read",
    "cron:_OnCron.note:compare:since <= moment <= self.until => LtE->Lt#2":
        "a change of offset at the very instant of until: the last run is before it either way",
    "cron:_OnCron.note:number:since / 86400 => 86400->86401":
        "a margin: the year of changes is read from a day earlier, and those before since are left out; "
        "the note looks about a year ahead, not to the day",
    "cron:_periodic_timing:delete:assert timezone is not None => pass":
        "the parser's contract, for the type checker: a schedule has its zone",
    "cron:_periodic_timing:delete:assert step is not None => pass":
        "the parser's contract, for the type checker: no schedule, so every",
    "cron:_periodic_timing:boolop:step is None or span is None => Or->And":
        "the parser's contract: every with a schedule has its for, and for goes with every",
    "judge:_judge:delete:assert isinstance(timing, _Once) => pass":
        "neither immediate nor periodic: a one-shot's timing; the assert is for the type checker",
    "channels:_Channels.__init__:delete:self._spawning: int | None = None => pass":
        "_start_worker sets it before any worker can read it",
    "channels:_Channels.spawn:number:(start, 0) => 0->-1":
        "a linger of -1 is no linger, as 0 is",
    "cli:_last_run:number:back = 1.0 => 1.0->2.0":
        _LAST_RUN_SEARCH,
    "cli:_last_run:number:back *= 2 => 2->3":
        _LAST_RUN_SEARCH,
    "cli:_own_clock:delete:return None => pass":
        "a function that ends returns None all the same",
    "cli:_own_clock:return:return None => 0":
        "_shown leaves out a remark that is empty: 0 as None",
    "cli:_own_clock:return:return None => 0#2":
        "the same",
    "cli:_own_clock:return:return None => 0#3":
        "the same",
    "cron:_Timing.note:delete:return None => pass":
        "a function that ends returns None all the same",
    "cli:_last_run:delete:assert isinstance(timing, _Periodic) and math.i... => pass":
        "only a periodic event with an until is asked its last run: the assert is there for the type checker",
    "cli:_last_run:boolop:isinstance(timing, _Periodic) and math.isfinite(timing.un... => And->Or":
        "the same assert",
    "cron:_Timing.clock:delete:return user => pass":
        "an immediate event's occurrence has no due time to tell, so its clock is never asked",
    "cron:_Timing.clock:return:return user => None":
        "the same: never asked",
    "scan:_Entry.mtime_ns:number:self.sig[3] if self.sig else 0 => 0->-1":
        "0 and -1 ns are both decades before any read: an entry without a signature is never racy either way",
    "scan:_sweep_batch:delete:if known == 0: return 0 => pass":
        "with nothing known the cost is 0, the period the interval, and min(0, ...) is 0 all the same",
    "scan:_sweep_batch:delete:return 0 => pass":
        "the same: the rest of the function returns 0 for nothing known",
    "scan:_sweep_batch:number:known == 0 => 0->-1":
        "known is never negative: the same as deleting the guard",
    "scan:_read_file:compare:remaining > 0 => Gt->GtE":
        "at 0 left, os.read(fd, 0) returns b'' and the loop breaks all the same",
    "scan:_read_file:number:getattr(os, 'O_NOCTTY', 0) => 0->1":
        "the default is used only where os has no O_NOCTTY; Linux has it",
    "scan:_read_file:number:getattr(os, 'O_NOCTTY', 0) => 0->-1":
        "the default is used only where os has no O_NOCTTY; Linux has it",
    "scan:_read_file:number:remaining > 0 => 0->-1":
        "> -1 is >= 0: the same as >= above",
    "scan:_read_file:number:getattr(os, 'O_CLOEXEC', 0) => 0->-1":
        "the default is used only where os has no O_CLOEXEC; Linux has it",
    "scan:_read_file:number:1 << 16 => 1->2":
        "the size of each read: the bytes read are the same, in fewer or more reads",
    "scan:_read_file:number:1 << 16 => 16->17":
        "the size of each read: the bytes read are the same, in fewer or more reads",
    "scan:_read_file:number:1 << 16 => 16->15":
        "the size of each read: the bytes read are the same, in fewer or more reads",
    "cron:_CronError.__init__:delete:super().__init__(reason) => pass":
        "BaseException.__new__ keeps the arguments already: str() is the reason all the same "
        "(needs_croniter is always passed by keyword)",
    "cron:_number:compare:len(digits) <= 9 => LtE->Lt":
        _LONG_NUMBER,
    "cron:_number:number:len(digits) <= 9 => 9->10":
        _LONG_NUMBER,
    "cron:_number:number:len(digits) <= 9 => 9->8":
        _LONG_NUMBER,
    "cron:_number:number:10 ** 9 => 10->11":
        _LONG_NUMBER,
    "cron:_number:number:10 ** 9 => 10->9":
        _LONG_NUMBER,
    "cron:_number:number:10 ** 9 => 9->10":
        _LONG_NUMBER,
    "cron:_number:number:10 ** 9 => 9->8":
        _LONG_NUMBER,
    "cron:_month_shape:number:(first.weekday() + 1) % 7 => 7->8":
        "the 1st's weekday only enters (first + day - 1) % 7, where Sunday as 7 is Sunday as 0",
    "cron:_nearest_weekday:return:return None => 0":
        "its callers compare it with a day of the month, which is never 0 either",
    "cron:_Cron.__init__:delete:self._times: _CronTimes | None = None => pass":
        "_compile_cron binds every _Cron it makes before anything reads _times",
    "cron:_Cron.bind:number:datetime(2001, 1, 1) => 2001->2002":
        "croniter's own start is never used: every get_next passes start_time",
    "cron:_Cron.bind:number:datetime(2001, 1, 1) => 2001->2000":
        "croniter's own start is never used: every get_next passes start_time",
    "cron:_Cron.bind:number:datetime(2001, 1, 1) => 1->2":
        "croniter's own start is never used: every get_next passes start_time",
    "cron:_Cron.bind:number:datetime(2001, 1, 1) => 1->2#2":
        "croniter's own start is never used: every get_next passes start_time",
    "cron:_Cron.match_after:delete:if times is None: raise RuntimeError('bind() co... => pass":
        "_compile_cron binds every _Cron it makes: the raise is there for the type checker",
    "cron:_Cron.match_after:delete:raise RuntimeError('bind() comes first') => pass":
        "the same unreachable raise",
    "cron:_Cron._days_from:delete:if year > wall.year: searched.add(year % 400) => pass":
        "the 400-year skip only saves time: without it, the years it skips are searched and found empty again",
    "cron:_Cron._days_from:delete:searched.add(year % 400) => pass":
        "the 400-year skip only saves time: without it, the years it skips are searched and found empty again",
    "cron:_Cron.next_after:delete:if memo is not None and memo[0] == (tz, after):... => pass":
        "the memo only saves time: the answer is computed again, the same",
    "cron:_Cron.next_after:delete:self._memo = ((tz, after), best) => pass":
        "the memo only saves time: the answer is computed again, the same",
    "cron:_Cron.next_after:delete:return memo[1] => pass":
        "the memo only saves time: the answer is computed again, the same",
    "cron:_Cron.next_after:number:memo[0] => 0->1":
        "the key is then compared with the answer, never equal: the memo is never used, the answer the same",
    "cron:_Cron.next_after:number:memo[0] => 0->-1":
        "the same: memo[-1] is the answer, never equal to the key",
    "cron:_Cron._next_after:delete:if off0 <= off1: return self._first_pass(tz, wa... => pass":
        "a shortcut: outside a repeated hour the fold path has a span of 0, and its second search starts a "
        "microsecond before the first, so it cannot beat it",
    "cron:_Cron._next_after:delete:return self._first_pass(tz, wall, after) => pass":
        "the same shortcut",
    "cron:_Cron._next_after:compare:off0 <= off1 => LtE->Lt":
        "the same shortcut, for equal offsets (the wall of a real instant is never in a gap)",
    "cron:_Cron._next_after:compare:candidate < b => Lt->LtE":
        "b follows the repeated range and occurs once: its one instant is the one the first pass finds",
    "cron:_Cron._next_after:compare:after < repeat < best => Lt->LtE":
        "a second-pass instant found from a wall before after's, or strictly after it, is never after itself",
    "cron:_Cron._next_after:compare:after < repeat < best => Lt->LtE#2":
        "when repeat equals best, taking either is the same instant",
    "cron:_Cron._first_pass:delete:raise _CronError('no occurrence found') => pass":
        "unreachable for a pattern bind() accepted (it fires, and each pass moves past a gap or returns)",
    "cron:_Cron._first_pass:delete:wall = candidate => pass":
        "unreachable: _next_after passes a wall at or after after's own (the second pass's end for a fold=1 "
        "time), so the first candidate's instant is after after; CronReferenceTest's minute walks agree",
    "cron:_Cron._first_pass:number:range(1000) => 1000->1001":
        "a cap never reached: each pass moves past a gap or returns",
    "cron:_Cron._first_pass:number:range(1000) => 1000->999":
        "a cap never reached: each pass moves past a gap or returns",
    "cron:_Cron._first_pass:compare:instant > after => Gt->GtE":
        "the candidate's wall is strictly after after's, and read at its first offset its instant is too",
    "cron:_utc_offset:delete:if offset is None: raise ValueError(f'{when!r} ... => pass":
        "every caller passes an aware datetime (next_fire checks its own argument): the raise is there "
        "for the type checker",
    "cron:_utc_offset:delete:raise ValueError(f'{when!r} is naive: it has no... => pass":
        "the same unreachable raise",
    "cron:_wall_instant:compare:off0 < off1 => Lt->LtE":
        "with equal offsets the transition searched for lies between two equal instants: that instant",
    "cron:_Cron._first_pass:compare:moment > after => Gt->GtE":
        "a gap's moment has the wall at the gap's end; an after equal to it has that wall too, so the "
        "search starts past the gap's candidate: never equal",
    "judge:_missed:delete:while (due := timing.next_after(until - back, m... => pass":
        _BACK_SEARCH,
    "judge:_missed:number:back = 1.0 => 1.0->2.0":
        _BACK_SEARCH,
    "judge:_missed:boolop:(due := timing.next_after(until - back, mtime)) >= until ... => And->Or":
        _BACK_SEARCH,
    "judge:_missed:compare:back < until - after => Lt->LtE":
        _BACK_SEARCH,
    "judge:_missed:number:back *= 2 => 2->3":
        _BACK_SEARCH,
    "judge:_missed:number:since - 0.001 => 0.001->0.002":
        "a margin for an occurrence at since itself (a float read back from the lock file): an occurrence "
        "1 to 2 ms before a trace is the same moment to anything the harness reads (mtimes, beats)",
    "channels:_Loop.call:number:timeout=0.25 => 0.25->0.5":
        "a margin: how often a worker waiting on the loop looks whether it still runs; a stopped loop is "
        "noticed a quarter second later, with the same outcome",
    "channels:_Loop.call:number:timeout=0.25 => 0.25->0.0":
        "a margin: the worker then looks without waiting (a busy wait), with the same outcome",
    "files:_Files.run_due:number:count % _BATCH == 0 => 0->-1":
        _GIL_OFFER,
    "files:_Files.run_due:delete:if count % _BATCH == 0: time.sleep(0) => pass":
        _GIL_OFFER,
    "files:_Files.run_due:delete:time.sleep(0) => pass":
        _GIL_OFFER,
    "files:_Files.run_due:number:enumerate(self.schedule.pop_due(now), 1) => 1->0":
        _GIL_OFFER,
    "files:_Files.run_due:compare:count % _BATCH == 0 => Eq->NotEq":
        _GIL_OFFER,
    "files:_File.parsed:delete:if self.event is None: raise TypeError(f'{self.... => pass":
        "a guard for the type checker: a file is fired, enqueued or judged only with an event",
    "files:_File.parsed:delete:raise TypeError(f'{self.name} has no valid event') => pass":
        "a guard for the type checker: a file is fired, enqueued or judged only with an event",
    "files:_Files._plan:delete:assert verdict.due is not None => pass":
        "a guard for the type checker: the judge's schedule always says when",
    "files:_Files._plan:delete:assert verdict.due is not None and f.first_look... => pass":
        "a guard for the type checker: only a first look misses, and what was missed was due",
    "files:_Files._plan:boolop:verdict.due is not None and f.first_look is not None => And->Or":
        "a guard for the type checker: only a first look misses, and what was missed was due",
    "cli:_serve.shut_down:delete:commands.kill_all() => pass":
        _LATE_SUPERVISOR,
    "cli:_serve.shut_down:number:_KILL_AFTER + _KILL_WAIT + 1 => 1->2":
        _LATE_SUPERVISOR,
    "cli:_serve.shut_down:number:_KILL_AFTER + _KILL_WAIT + 1 => 1->0":
        _LATE_SUPERVISOR,
    "cli:_with_signals_handled:delete:thread.join(_SIGNAL_TICK) => pass":
        "cost only: the main thread then spins instead of waking every tick, and signals are heard as well",
    "cli:_with_signals_handled:number:outcome[0] => 0->-1":
        "the list holds one outcome: its first is its last",
    "cli:_with_signals_handled:number:outcome[0] => 0->-1#2":
        "the list holds one outcome: its first is its last",
    "cli:_with_signals_handled:number:outcome[0] => 0->-1#3":
        "the list holds one outcome: its first is its last",
    "cli:_with_signals_handled:bool:daemon=True => True->False":
        "the main thread joins it anyway, and a second signal leaves by os._exit, which waits for no thread",
    "files:_Files._delete:delete:self._gone(f.name) => pass":
        "the next scan sees the name gone and forgets it the same way; _gone does it a poll sooner",
    "files:_Files._gone:delete:self._scanner.forget(name) => pass":
        "the name was emptied: the directory's mtime changed, so the next scan lists it and finds it gone",
    "files:_Files._invalid:delete:return => pass#2":
        "the take that follows finds the name empty (or another file) and forgets it: the same outcome",
    "files:_Files._invalid:delete:f.digest = _digest(data) => pass":
        "the content is the one last read unless rewritten since; a rewrite within a tick then fails the "
        "racy check and is judged anew by the next scan instead of at once",
    "cli:_Commands._drain:number:time.monotonic() + 1.0 => 1.0->2.0":
        "a margin: how long endless output is drained before it is given up on",
    "cli:_one_line:delete:if text.isprintable(): return text => pass":
        "the shortcut: the character-by-character join gives a printable text back unchanged, more slowly",
    "cli:main:return:return 0 => None":
        "sys.exit(None) exits with status 0 too",
    "files:_Files._retry_later:number:delay * 1000 => 1000->1001":
        "%d truncates: 100.1 ms is said as 100 ms",
    "files:_Files._changed:number:(sig, 0, first_look) => 0->-1":
        "_load resets the count itself when the content read differs from the last read, as it does for any "
        "change but a touch; and a file touched with the same bad content was renamed away already",
    "files:_Files._invalid:delete:self._gone(f.name) => pass":
        "the next scan sees the name gone and forgets it the same way; _gone does it a poll sooner",
    "files:_Files._delete:delete:self._cancel(f) => pass":
        "called once the file's run or verdict is over: nothing of it is scheduled or queued any more",
    "scanner:_Scanner.__init__:delete:self._dir_key: tuple[int, int, int] | None = None => pass":
        "the first look (at start-up) sets it before anything reads it; a failed one sets it or returns first",
    "scanner:_Scanner.__init__:delete:self._dir_racy = False => pass":
        "the first look is a start-up's, which lists whatever _dir_racy says, and sets it",
    "scanner:_Scanner.__init__:bool:self.came_back = False => False->True":
        "the first look clears it, and a start-up's first look has its start-up facts already",
    "scanner:_Scanner._look:delete:if self._dir_fd_id != dir_id: self._open_dir() => pass":
        "the directory's descriptor only speeds the sweep's stats: without one it stats by path (the "
        "TypeError fallback), with the same entries",
    "scanner:_Scanner._look:compare:self._dir_fd_id != dir_id => NotEq->Eq":
        "the same: the descriptor is then never opened, and the sweep stats by path",
    "scanner:_Scanner._sweep:delete:if self._ticks % self._sweep_every: return => pass":
        "the sweep's pace only: it then stats its batch every tick, finding rewrites as soon or sooner at "
        "more cost (the idle benchmark measures the cost)",
    "scanner:_Scanner._sweep:delete:continue => pass":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:delete:if st.st_ctime_ns == old.sig[4] and st.st_size ... => pass":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:compare:old.sig is not None => IsNot->Is":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:delete:continue => pass#2":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:number:0.3 * (time.perf_counter() - started) => 0.3->0.6":
        "the weight of the latest batch in the stat cost's average: the sweep's pace only",
    "scanner:_Scanner._look:negate:if self._dir_fd_id != dir_id: self._open_dir() => not":
        "the same: the descriptor is then never opened, and the sweep stats by path",
    "scanner:_Scanner._look:delete:self._open_dir() => pass":
        "the same: the descriptor is then never opened, and the sweep stats by path",
    "scanner:_Scanner._sweep:delete:return => pass":
        _SWEEP_PACE,
    "scanner:_Scanner._sweep:delete:self._ticks += 1 => pass":
        _SWEEP_PACE,
    "scanner:_Scanner._sweep:number:self._ticks += 1 => 1->2":
        _SWEEP_PACE,
    "scanner:_Scanner._sweep:number:self._ticks += 1 => 1->0":
        _SWEEP_PACE,
    "scanner:_Scanner._sweep:delete:self._stat_cost = 0.7 * self._stat_cost + 0.3 *... => pass":
        "the stat cost's average: the sweep's pace only",
    "scanner:_Scanner._sweep:number:0.7 * self._stat_cost => 0.7->0.0":
        "the stat cost's average: the sweep's pace only (a cost of 0 sweeps every file each time)",
    "scanner:_Scanner._sweep:number:0.3 * (time.perf_counter() - started) => 0.3->0.0":
        "the stat cost's average: the sweep's pace only",
    "scanner:_Scanner._sweep:delete:if old is not None and old.sig is not None: try... => pass":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:number:old.sig[4] => 4->3":
        "the shortcut then compares the new ctime with the old mtime: equal when the file was last written "
        "(ctime = mtime), else the full stat runs; a rewrite changes the ctime past both",
    "scanner:_Scanner._sweep:number:old.sig[2] => 2->3":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:number:old.sig[2] => 2->1":
        _SWEEP_SHORTCUT,
    "scanner:_Scanner._sweep:delete:if name in seen: continue => pass":
        "a name the listing has just looked at is statted again: the same entry (or a newer one) for a stat",
    "cli:_Commands._supervise:boolop:stdin is None or stdout is None or stderr is None => Or->And":
        "a guard for the type checker: __call__ always makes the three pipes",
    "cli:_Commands.kill_all:number:timeout=1.0 => 1.0->2.0":
        "a margin: how long a signal handler waits for a command being started (a Popen takes milliseconds)",
    "cli:_one_line:delete:return text => pass":
        "the shortcut's return: the character-by-character join gives a printable text back unchanged",
    "cli:_Commands._supervise:delete:if not exited: try: proc.wait(0.1) except subpr... => pass":
        "cost only: the loop then spins instead of waiting a tenth of a second for the command's end",
    "cli:_Commands._supervise:compare:now >= exited_at + _LEFTOVER_GRACE => GtE->Gt":
        "differs only when the monotonic clock reads exactly the grace's end",
    "cli:_Commands._supervise:compare:now >= deadline => GtE->Gt":
        "differs only when the monotonic clock reads exactly the deadline",
    "cli:_Commands._supervise:delete:proc.wait(0.1) => pass":
        "cost only: the loop then spins instead of waiting a tenth of a second for the command's end",
    "cli:_Commands._supervise:number:proc.wait(0.1) => 0.1->0.0":
        "cost only: the loop then spins instead of waiting a tenth of a second for the command's end",
    "cli:_Commands._supervise:number:proc.wait(0.1) => 0.1->0.2":
        "the loop's pace: a deadline is then seen up to a fifth of a second late",
    "cli:_Commands._supervise:number:time.sleep(0.1) => 0.1->0.0":
        "cost only: the loop then spins instead of waiting a tenth of a second for the leftovers' end",
    "cli:_Commands._drain:compare:time.monotonic() < give_up_at => Lt->LtE":
        "differs only when the monotonic clock reads exactly the moment to give up",
    "cli:_Commands._drain:number:selector.select(0) => 0->-1":
        "the selectors module takes a negative timeout as 0: a poll",
    "cli:_Commands._feed:delete:selector.unregister(pipe.fileno()) => pass":
        "the pipe is closed just after: epoll drops a closed descriptor itself, so it is never reported, and "
        "_drain's unregister of it ignores the error",
    "cli:_check_line:delete:assert due is not None => pass":
        "a guard for the type checker: the judge's schedule always has a time",
    "cli:_check_line:delete:assert verdict.late is not None => pass":
        "a guard for the type checker: the judge's late run always says by how much",
    "cli:_Commands._supervise:compare:now >= kill_at => GtE->Gt":
        "differs only when the monotonic clock reads exactly the time for SIGKILL",
    "cli:_Commands._supervise:number:selector.select(0.1) => 0.1->0.0":
        "cost only: the loop then polls the pipes without waiting",
    "cli:_Commands._relay:delete:return => pass":
        "at the end of the output the buffer holds no whole line (each read's lines were logged): the loop "
        "below returns at once",
    "cli:_check:delete:sys.stdout.flush() => pass":
        "the interpreter flushes stdout as --check exits, and nothing is written after",
    "channels:_Channels.staff:delete:return => pass":
        "the guard's return: _staff then returns at once for an empty ready queue (a lock more)",
    "files:_Files._changed:number:(sig, 0, first_look) => 0->1":
        "_load resets the count itself when the content read differs from the last read, as it does for any "
        "change but a touch; and a file touched with the same bad content was renamed away already",
    "files:_Files._load:delete:f.event = None => pass":
        "nothing reads a file's event while it has no firing scheduled or queued: firing, the cancelled line "
        "and deletion all go by the entry or the job (HistoryTest checks the cancelled line)",
    "files:_Files._load:delete:f.event = None => pass#2":
        "the same, during the retries",
    "files:_Files._load:number:(event, 0) => 0->1":
        "after a good read the count is read again only by a retry, and retries follow only a change, "
        "which resets it (_changed) or a bad read (which _retry_later counts from there)",
    "files:_Files._load:number:(event, 0) => 0->-1":
        "the same",
    "channels:_Channels._wait_to_start:delete:self._work.wait(delay) => pass":
        "cost: the waiting worker then spins holding the pool's lock for up to _SPAWN_AFTER (20 ms), a stall "
        "of that length, with the same runs in the same order (LifecycleTest's 5 s variant sees the stall "
        "when it catches the worker waiting, which under load it does not always)",
    "watcher:EventsWatcher._run:delete:if until_due < _LEAD and action == 'fire': self... => pass":
        "the last millisecond is then reached by passes that skip the sleep (a negative timeout) instead of "
        "by the spin: the same instant, without the worker's stand-by (a thread start later)",
    "scanner:_Hold.keep_alive:delete:self._next_beat = mono + _HEARTBEAT => pass":
        "cost only: the lock file's mtime is then refreshed at every poll, not every second (a trace as "
        "fresh or fresher)",
    "scanner:_DirectoryLock.__init__:number:os.ftruncate(fd, 0) => 0->1":
        "the new content, written from offset 0, is never shorter than one byte",
    "scanner:_DirectoryLock.__init__:number:os.pread(fd, 256, 0) => 256->257":
        _LOCK_READ,
    "scanner:_DirectoryLock.__init__:number:os.pread(fd, 256, 0) => 256->255":
        _LOCK_READ,
    "scanner:_DirectoryLock.__init__:number:os.pread(fd, 256, 0) => 0->1":
        _LOCK_READ,
    "scanner:_DirectoryLock.__init__:number:os.pread(fd, 32, 0) => 32->33":
        "the holder's PID line is far shorter than 31 bytes",
    "scanner:_DirectoryLock.__init__:number:os.pread(fd, 32, 0) => 32->31":
        "the holder's PID line is far shorter than 31 bytes",
    "scanner:_DirectoryLock.beat:delete:if self._fd is None: return => pass":
        "a guard: nothing beats a released lock (the closer lets it go after the scheduler thread has ended)",
    "scanner:_DirectoryLock.beat:number:os.ftruncate(self._fd, 0) => 0->1":
        "the content then written from offset 0 is never shorter than one byte",
    "scanner:_Scanner.__init__:bool:self._dir_racy = False => False->True":
        "the first look is a start-up's, which lists whatever _dir_racy says, and sets it",
    "scanner:_Scanner.__init__:number:self._sweep_at = 0 => 0->1":
        "where the round robin starts: every name is still visited once a pass",
    "scanner:_Scanner.__init__:number:self._sweep_at = 0 => 0->-1":
        "where the round robin starts: every name is still visited once a pass",
    "scanner:_Scanner.__init__:number:self._stat_cost = 5e-06 => 5e-06->1e-05":
        "the first guess of a stat's cost, soon replaced by the measured one: the sweep's pace only",
    "scanner:_Scanner.__init__:number:self._stat_cost = 5e-06 => 5e-06->0.0":
        "the first guess of a stat's cost, soon replaced by the measured one: the sweep's pace only",
    "history:_History._cut_last_line:number:1 << 16 => 16->17":
        "the chunk read back at a time: any size finds the same last newline",
    "history:_History._cut_last_line:number:1 << 16 => 16->15":
        "the chunk read back at a time: any size finds the same last newline",
    "files:_Files._cancel:delete:f.queued = None => pass":
        "the next occurrence's merge finds the cancelled one no longer waiting (withdrawn, or started): as "
        "if there were none",
    "files:_Files._fire:compare:now - due >= _LATE => GtE->Gt":
        "the run measures lateness again as it starts, on the same clock, no earlier: a second late then too",
    "files:_Runs.perform:delete:_running.journal = _running.run = None => pass":
        "the next job on the thread sets them again before --exec reads them; a submitted function never "
        "runs the CLI's command (it is the only reader)",
    "schedule:_Schedule.cancel:number:f.generation += 1 => 1->2":
        "any new generation kills the record's old entries: 2 as well as 1",
    "history:_History._cut_last_line:number:1 << 16 => 1->2":
        "the chunk read back at a time: any size finds the same last newline",
    "history:_History._cut_last_line:number:size - 1 => 1->0":
        "the search back for a newline starts at the last byte too, which is not one (checked just before)",
    "history:_History._cut_last_line:number:os.pread(fd, 1, size - 1) => 1->2":
        "reading two bytes from the last one reads one: the file ends there",
    "judge:_no_run_left:compare:until.timestamp() > now => Gt->GtE":
        "an until at the very microsecond of now: either wording is true of it",
    "scan:_own_names:delete:continue => pass":
        "the last statement of the loop's body: the loop goes on either way",
    "scan:_Entry.mtime_ns:number:self.sig[3] if self.sig else 0 => 0->1":
        "an entry that could not be stat'ed sorts among the files dated to the first nanosecond of 1970",
    "scanner:_fold:number:run['sig'][3] => 3->4#3":
        "the key keeps one record per version of a file in one journal, and one file has one run at a time: "
        "another field of the signature serves as well (what is carried is checked against the whole of it)",
    "scanner:_fold:number:run['sig'][3] => 3->2#3":
        "the key keeps one record per version of a file in one journal, and one file has one run at a time: "
        "another field of the signature serves as well (what is carried is checked against the whole of it)",
    "scanner:_fold:number:record['sig'][3] => 3->4":
        "the key keeps one record per version of a file in one journal, and one file has one run at a time: "
        "another field of the signature serves as well (what is carried is checked against the whole of it)",
    "scanner:_fold:number:record['sig'][3] => 3->2":
        "the key keeps one record per version of a file in one journal, and one file has one run at a time: "
        "another field of the signature serves as well (what is carried is checked against the whole of it)",
    "watcher:EventsWatcher._tick:bool:self, now: float, poll: bool=True => True->False":
        "the module passes poll at both calls; only benchmarks/walk.py leans on the default",
    "history:_History._append:compare:os.fstat(fd).st_size > size => Gt->GtE":
        "at the same size nothing was written: cutting back to it changes nothing",
    "files:_Files.run_due:number:enumerate(self.schedule.pop_due(now), 1) => 1->2":
        _GIL_OFFER,
    "scan:_take:delete:return None => pass#3":
        "the last statement: the function returns None all the same",
    "cron:_CronTimes.get_next:delete:... => pass":
        "a Protocol's stub: its body never runs",
    "scanner:_last_beat:number:os.pread(fd, 256, 0) => 256->255":
        _LOCK_READ,
    "scanner:_last_beat:number:os.pread(fd, 256, 0) => 0->1":
        _LOCK_READ,
    "scanner:_DirectoryLock.beat:delete:return => pass":
        "no beat follows a release: a step after stop() does nothing, and again() replaces the lock it releases",
    "scanner:_process_start:delete:return None => pass":
        "the function then ends, returning None all the same",
    "scanner:_machine:return:return '' => None":
        "'' and None say the same to every reader: the journal's machine is only asked whether it is set and equal",
    "scanner:_stop_session:delete:if not _run_members(sid): return len(members) => pass":
        "signalling a session with no member left finds no process (ProcessLookupError), and its wait ends at once",
    "scanner:_stop_session:delete:return len(members) => pass#2":
        "signalling a session with no member left finds no process (ProcessLookupError), and its wait ends at once",
    "scanner:_stop_session:delete:time.sleep(0.01) => pass":
        "the pace of the poll for the session's end only",
    "scanner:_stop_session:number:time.sleep(0.01) => 0.01->0.02":
        "the pace of the poll for the session's end only",
    "scanner:_stop_session:number:time.sleep(0.01) => 0.01->0.0":
        "the pace of the poll for the session's end only",
    "scanner:_stop_session:compare:time.monotonic() < deadline => Lt->LtE":
        "differs only when the monotonic clock reads exactly the deadline",
    "scanner:_fold:number:-1 => 1->2":
        "-2 is below every line, as -1 is",
    "scanner:_fold:compare:number > counted_at.get(key[:2], -1) => Gt->GtE":
        "a fire's line is never the line of a counted record, and the default -1 is below every line",
    "scanner:_Journal.__init__:number:self._size = 0 => 0->1":
        "begin() sets the size before any write, and a write before it finds no descriptor",
    "scanner:_Journal.__init__:number:self._size = 0 => 0->-1":
        "begin() sets the size before any write, and a write before it finds no descriptor",
    "scanner:_Journal.__init__:number:int.from_bytes(os.urandom(7), 'big') >> 4 => 4->3":
        "53 bits are still exact in JSON; ids would pass 2**53 only from a random start within a run count of it",
    "scanner:_Journal.__init__:number:os.urandom(7) => 7->6":
        "44 random bits instead of 52: journals still tell each other apart, at odds no test can show",
    "scanner:_Journal.fired:boolop:job.occurrence.type == 'periodic' and job.due is not None... => And->Or":
        "fire records of other jobs are never asked for: accounts are read for periodic files only",
    "scanner:_Journal._own:return:return None => 0":
        "no compaction or carrying over follows close(), the one way to a journal without a descriptor",
    "scanner:_Journal._own:delete:self._failed(exc) => pass":
        "a read of the journal's own open descriptor does not fail short of an I/O error no test can make",
    "scanner:_Journal._own:return:return None => 0#3":
        "a read of the journal's own open descriptor does not fail short of an I/O error no test can make",
    "scanner:_Journal._own:number:os.pread(self._fd, st.st_size, 0) => 0->1":
        "only the first record, the harness's, loses its first byte and is skipped: it is never among what is open",
    "scanner:_Systemd.__init__:number:self._next_ping = 0.0 => 0.0->1.0":
        "the monotonic clock is past a second from boot on: the first ping comes at once either way",
    "scanner:_Systemd.send:delete:log.debug('cannot notify systemd at %s (%s)', s... => pass":
        "a debug line's wording (the CLI never shows debug lines)",
    "scanner:_Systemd.send:boolop:exc.strerror or exc => Or->And":
        "a debug line's wording (the CLI never shows debug lines)",
    "scanner:_Systemd.ping:compare:mono >= self._next_ping => GtE->Gt":
        "differs only when the monotonic clock reads exactly the ping time",
    "scanner:_Scanner.__init__:number:self._ticks = 0 => 0->-1":
        _SWEEP_PACE,
    "scanner:_Scanner.scan:return:return None => 0":
        "0 and None are alike to the caller: no changes",
    "judge:_missed:compare:due < account.counted => Lt->LtE":
        "a lost occurrence due at the count itself is counted by the walk from there, and is the latest either way",
    "scanner:_fold:delete:continue => pass#3":
        "the last statement of the loop's body (its except clause): the loop goes on either way",
    "scanner:_Hold.__init__:delete:self._holder = '' => pass":
        "wait() reads it only after take() failed, which sets it; _stand_by always tries take() first",
}


# -- making mutants ------------------------------------------------------------

@dataclass
class Mutant:
    id: str          # stable: no line number in it
    part: str
    function: str
    line: int
    op: str
    index: int       # which mutation site in the walk (for applying it)
    variant: int     # which change at that site
    in_default: bool = False  # a parameter's default value: the documented signatures show it too


_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def _short(node: ast.AST, limit: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _number_variants(value) -> list:
    if isinstance(value, int):
        return [value + 1, value - 1]
    return [value * 2, 0.0] if value else [1.0]


def _sites(node: ast.AST):
    """Yield (node, op, [(description, apply)...]) for every place a mutant
    can be made in ``node`` (a function body), in a fixed order.  ``apply``
    changes the node in place (or returns a replacement statement)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Compare):
            for i, op in enumerate(child.ops):
                if type(op) in _FLIP:
                    new = _FLIP[type(op)]
                    yield child, "compare", [(f"{type(op).__name__}->{new.__name__}",
                                              lambda c=child, i=i, new=new: c.ops.__setitem__(i, new()))]
        elif isinstance(child, ast.Constant) and type(child.value) in (int, float):
            yield child, "number", [(f"{child.value!r}->{v!r}", lambda c=child, v=v: setattr(c, "value", v))
                                    for v in _number_variants(child.value)]
        elif isinstance(child, ast.Constant) and isinstance(child.value, bool):
            yield child, "bool", [(f"{child.value}->{not child.value}",
                                   lambda c=child: setattr(c, "value", not c.value))]
        elif isinstance(child, ast.BoolOp):
            new = ast.Or if isinstance(child.op, ast.And) else ast.And
            yield child, "boolop", [(f"{type(child.op).__name__}->{new.__name__}",
                                     lambda c=child, new=new: setattr(c, "op", new()))]
        elif isinstance(child, (ast.If, ast.While)):
            yield child, "negate", [("not", lambda c=child: setattr(c, "test", ast.UnaryOp(ast.Not(), c.test)))]
        if isinstance(child, ast.Return) and child.value is not None and not (
                isinstance(child.value, ast.Constant) and child.value.value is None):
            yield child, "return", [("None", lambda c=child: setattr(c, "value", ast.Constant(None)))]
        elif isinstance(child, ast.Return) and child.value is not None:  # an explicit None means something
            yield child, "return", [("0", lambda c=child: setattr(c, "value", ast.Constant(0)))]
        for field in ("body", "orelse", "finalbody"):
            body = getattr(child, field, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.Pass, ast.FunctionDef,
                                                                        ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if i == 0 and field == "body" and _is_docstring(stmt):
                    continue
                yield stmt, "delete", [("pass", lambda b=body, i=i: b.__setitem__(i, ast.Pass()))]


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _functions(tree: ast.Module, source: str):
    """Yield (part, qualified name, function node) for every function of the
    module, outermost first, in source order."""
    banners = []  # (line, part)
    lines = source.splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("# ---") and number < len(lines):
            text = lines[number].lstrip("# ").strip()
            for start, part in SECTIONS.items():
                if text.startswith(start):
                    banners.append((number, part))

    def part_of(node):
        part = None
        for line, name in banners:
            if line < node.lineno:
                part = name
        return OWN_PART.get(node.name, part)

    def walk(nodes, prefix, part):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield part, prefix + node.name, node
                yield from walk(node.body, prefix + node.name + ".", part)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, prefix + node.name + ".", part)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from walk([node], "", part_of(node))


def _walk_sites(tree: ast.Module, source: str):
    """Every mutation site, in a fixed order: (part, function, site node, op, variants)."""
    for part, name, function in _functions(tree, source):
        defaults = [d for d in function.args.defaults + function.args.kw_defaults if d is not None]
        skip = set()  # nested definitions are functions of their own
        for inner in ast.walk(function):
            if inner is not function and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                skip.update(id(x) for x in ast.walk(inner) if x is not inner)
        holder = ast.Module(body=function.body, type_ignores=[])
        for site in _sites(holder):
            if id(site[0]) in skip:
                continue
            yield (part, name) + site
        for default in defaults:
            for site in _sites(ast.Module(body=[ast.Expr(default)], type_ignores=[])):
                if site[1] != "delete":
                    yield (part, name) + site


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    found, seen = [], collections.Counter()
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for index, (part, function, node, op, variants) in enumerate(_walk_sites(tree, source)):
        for variant, (change, _) in enumerate(variants):
            if op in ("number", "bool"):  # a constant alone says too little: name its expression
                before = _short(parents[id(node)])
            else:
                before = _short(node, 50 if op in ("delete", "negate") else 60)
            key = f"{part}:{function}:{op}:{before} => {change}"
            seen[key] += 1
            found.append(Mutant(f"{key}#{seen[key]}" if seen[key] > 1 else key, part, function,
                                getattr(node, "lineno", 0), op, index, variant,
                                isinstance(parents.get(id(node)), ast.arguments)))
    return found


def mutated_source(source: str, mutant: Mutant) -> str:
    tree = ast.parse(source)
    for index, (_, _, _, _, variants) in enumerate(_walk_sites(tree, source)):
        if index == mutant.index:
            variants[mutant.variant][1]()
            break
    else:
        raise LookupError(mutant.id)
    return ast.unparse(ast.fix_missing_locations(tree))


# -- running them ----------------------------------------------------------------

def _slot(base: Path, number: int) -> Path:
    """A directory with what the tests read beside the module: the tests, the
    README, the docs, the example events (copies: the tests find their files by their
    own resolved path)."""
    slot = base / f"slot{number}"
    slot.mkdir()
    shutil.copy(TESTS, slot / TESTS.name)
    shutil.copy(ROOT / "README.md", slot / "README.md")
    for folder in ("events", "docs"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, slot / folder)
    return slot


_JAIL: list[str] | None = None


def _jail() -> list[str]:
    """A PID namespace of its own for each mutant's tests, where the machine
    allows one: a mutant of the code that ends ``--exec`` runs can signal
    processes it should not (a flipped session test in ``_run_members``
    killed every process of the machine's user, this script included)."""
    global _JAIL
    if _JAIL is None:
        _JAIL = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        try:
            works = subprocess.run([*_JAIL, "true"], stderr=subprocess.DEVNULL).returncode == 0
        except OSError:
            works = False
        if not works:
            print("no PID namespace here (unshare failed): mutants of the run-stopping code may kill other "
                  "processes; run this in a container", file=sys.stderr)
            _JAIL = []
    return _JAIL


RUNNING: dict[Path, subprocess.Popen] = {}  # slot -> its test process, killed if this run is


_RUNNER = r"""
import os, sys, unittest
import test_mom_events
progress = int(os.environ["MOM_MUTATE_PROGRESS"])
for name in sys.argv[1:]:
    os.write(progress, (name + "\n").encode())
    result = unittest.TestResult()
    result.failfast = True
    unittest.defaultTestLoader.loadTestsFromName("test_mom_events." + name).run(result)
    if not result.wasSuccessful():
        os._exit(1)
os._exit(0)
"""


def run_tests(slot: Path, source: str, tests: list[str], limits: dict[str, float] | float) -> tuple[str, float]:
    """'killed', 'survived' or 'timeout' (killed too), and the seconds taken.
    ``tests`` are unittest names below test_mom_events (classes or methods),
    run in order until one fails.  ``limits``: seconds for each test (a test
    that hangs is found as soon as it outlasts its own), or for them all."""
    (slot / "mom_events.py").write_text(source)
    (slot / "_mutant_runner.py").write_text(_RUNNER)
    start = time.monotonic()
    read, write = os.pipe()
    proc = RUNNING[slot] = subprocess.Popen(
        [*_jail(), sys.executable, "_mutant_runner.py", *tests], cwd=slot, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, pass_fds=(write,), start_new_session=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MOM_MUTATE_PROGRESS": str(write)})
    os.close(write)
    outcome, pending = "timeout", b""
    deadline = start + (limits if isinstance(limits, float) else 30)
    try:
        while True:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break  # the test running outlasted its limit: a hang
            chunk = os.read(read, 4096)
            if not chunk:  # the runner has ended
                outcome = "survived" if proc.wait() == 0 else "killed"
                break
            pending += chunk
            *names, pending = pending.split(b"\n")
            if names and not isinstance(limits, float):
                deadline = time.monotonic() + limits[names[-1].decode()]
    finally:
        os.close(read)
        try:
            os.killpg(proc.pid, 9)  # and whatever the tests started
        except ProcessLookupError:
            pass
        proc.wait()
    return outcome, time.monotonic() - start


# -- which tests run which function -------------------------------------------------
#
# A mutant inside a function can only be noticed by a test that runs that
# function (default values included: they matter only to its calls), so each
# mutant runs the tests that called its function in an unmutated run of the
# whole suite, quickest first.  The map is made once per version of the module
# and tests (about as long as the suite under a light trace) and kept in
# benchmarks/.mutate-coverage.json.  Functions run by a harness the tests
# start (python mom_events.py ...) are seen through a sitecustomize that the
# map's run puts on PYTHONPATH.  A test that runs a function only by the luck of
# timing can be missed: its mutants then survive here, and are for a reader
# to look at, never counted killed by mistake.

_SITECUSTOMIZE = r"""
import os, sys, threading
_out = os.environ.get("MOM_MUTATE_COVER")
if _out:
    _seen = set()
    _test = os.environ.get("MOM_MUTATE_TEST", "?")
    def _call(frame, event, arg, _seen=_seen):
        code = frame.f_code
        if code not in _seen and os.path.basename(code.co_filename) == "mom_events.py":
            _seen.add(code)
            with open(os.path.join(_out, "%s.%d" % (_test, os.getpid())), "a") as f:
                f.write(code.co_qualname + "\n")
        return None
    sys.settrace(_call)
    threading.settrace(_call)
"""

_COVER_RUNNER = r"""
import json, os, sys, threading, time, unittest
import test_mom_events
out = sys.argv[1]
current = ["?"]
seen = {}
def _call(frame, event, arg):
    code = frame.f_code
    if os.path.basename(code.co_filename) == "mom_events.py":
        seen.setdefault(current[0], set()).add(code.co_qualname)
    return None
tests = []
def flat(suite):
    for t in suite:
        if isinstance(t, unittest.BaseTestSuite):  # the test file's load_tests has suites of its own
            flat(t)
        else:
            tests.append(t)
flat(unittest.defaultTestLoader.loadTestsFromModule(test_mom_events))
sys.settrace(_call)
threading.settrace(_call)
found = {}
for test in tests:
    name = test.id().split(".", 1)[1]
    current[0] = name
    os.environ["MOM_MUTATE_TEST"] = name
    result = unittest.TestResult()
    start = time.monotonic()
    test(result)
    found[name] = {"seconds": time.monotonic() - start, "ok": result.wasSuccessful(),
                   "functions": sorted(seen.pop(name, ()))}
sys.settrace(None)
threading.settrace(None)
children = os.environ["MOM_MUTATE_COVER"]
for entry in os.listdir(children):
    name = entry.rsplit(".", 1)[0]
    with open(os.path.join(children, entry)) as f:
        more = {line.strip() for line in f if line.strip()}
    if name in found:
        found[name]["functions"] = sorted(set(found[name]["functions"]) | more)
with open(out, "w") as f:
    json.dump(found, f)
"""

CACHE = ROOT / "benchmarks" / ".mutate-coverage.json"


def _function_name(qualname: str) -> str:
    """A code object's qualified name as _functions() names it: nested
    functions are Outer.inner; lambdas and comprehensions are their function."""
    parts = []
    for piece in qualname.split("."):
        if piece == "<locals>":
            continue
        if piece.startswith("<"):
            break
        parts.append(piece)
    return ".".join(parts)


def coverage_map(slot: Path, source: str) -> dict[str, dict]:
    """test name -> {"seconds", "ok", "functions"}: made in ``slot`` or read from the cache."""
    import hashlib
    import json
    key = hashlib.sha256((source + TESTS.read_text() + _SITECUSTOMIZE + _COVER_RUNNER).encode()).hexdigest()
    if CACHE.exists():
        cached = json.loads(CACHE.read_text())
        if cached.get("key") == key:
            return cached["tests"]
    print("mapping which tests run which function (one traced run of the suite)...", file=sys.stderr, flush=True)
    (slot / "mom_events.py").write_text(source)
    site = slot / "_cover_site"
    children = slot / "_cover_children"
    site.mkdir(exist_ok=True)
    children.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    (slot / "_cover_runner.py").write_text(_COVER_RUNNER)
    out = slot / "_cover.json"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MOM_MUTATE_COVER": str(children),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    subprocess.run([sys.executable, "_cover_runner.py", str(out)], cwd=slot, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tests = json.loads(out.read_text())
    for name in ("_cover_runner.py", "_cover.json"):
        (slot / name).unlink()
    shutil.rmtree(site)
    shutil.rmtree(children)
    failing = [name for name, t in tests.items() if not t["ok"]]
    print(f"mapped {len(tests)} tests in {time.monotonic() - start:.0f} s"
          f"{'; failing under the trace: ' + ', '.join(failing) if failing else ''}", file=sys.stderr)
    for t in tests.values():
        t["functions"] = sorted({_function_name(q) for q in t["functions"]})
    CACHE.write_text(json.dumps({"key": key, "tests": tests}))
    return tests


def tests_for(function: str, tests: dict[str, dict]) -> list[str]:
    """The tests that ran ``function`` (or a function nested in it), quickest first."""
    hits = [name for name, t in tests.items()
            if any(f == function or f.startswith(function + ".") for f in t["functions"])]
    return sorted(hits, key=lambda name: tests[name]["seconds"])


def _table(results: dict[str, list], equivalent: collections.Counter) -> str:
    rows = ["| part | mutants | killed | survived | equivalent (excluded) | score |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    total = collections.Counter()
    for part in list(SECTIONS.values()) + list(OWN_PART.values()):
        outcomes = results.get(part)
        if not outcomes and not equivalent[part]:
            continue
        outcomes = outcomes or []
        killed = sum(o != "survived" for o in outcomes)
        survived = len(outcomes) - killed
        n = len(outcomes) + equivalent[part]
        total.update(mutants=n, killed=killed, survived=survived, equivalent=equivalent[part])
        score = f"{100 * killed / (killed + survived):.0f} %" if killed + survived else "-"
        rows.append(f"| {part} | {n} | {killed} | {survived} | {equivalent[part]} | {score} |")
    k, s = total["killed"], total["survived"]
    rows.append(f"| all | {total['mutants']} | {k} | {s} | {total['equivalent']} | "
                f"{100 * k / (k + s):.0f} % |" if k + s else "| all | 0 | | | | |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", choices=sorted(COVERING), help="only this part (repeatable)")
    parser.add_argument("--function", help="only functions whose qualified name matches this regex")
    parser.add_argument("--op", action="append", help="only this kind of mutant (compare, number, bool, "
                        "boolop, negate, return, delete; repeatable)")
    parser.add_argument("--sample", "--limit", type=int, dest="sample", help="run N mutants chosen at random")
    parser.add_argument("--seed", type=int, default=1, help="for --sample (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel test processes (default 2)")
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: each test 10 s plus four "
                        "times what it took in the map's run; 60 s in all with --classes)")
    parser.add_argument("--classes", action="store_true", help="run each part's test classes (COVERING) "
                        "instead of the tests that ran the mutant's function")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--list-survivors", action="store_true", help="list the survivors and equivalents")
    parser.add_argument("--ids", help="a file of mutant ids to run (one a line), e.g. last run's survivors")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # killed: its test processes go too

    source = MODULE.read_text()
    everything = mutants(source)
    unknown = set(EQUIVALENT) - {m.id for m in everything}
    if unknown:
        print("equivalent mutants not found (the code changed?):", *sorted(unknown), sep="\n  ", file=sys.stderr)
    chosen = [m for m in everything if (not args.part or m.part in args.part)
              and (not args.function or re.search(args.function, m.function))
              and (not args.op or m.op in args.op)]
    if args.ids:
        wanted = {line.strip() for line in Path(args.ids).read_text().splitlines()}
        chosen = [m for m in chosen if m.id in wanted]
    equivalent = collections.Counter(m.part for m in chosen if m.id in EQUIVALENT)
    to_run = [m for m in chosen if m.id not in EQUIVALENT]
    if args.sample is not None and args.sample < len(to_run):
        to_run = sorted(random.Random(args.seed).sample(to_run, args.sample), key=everything.index)
        equivalent = collections.Counter()  # a sample says nothing about them
    if args.list:
        for m in chosen:
            print(f"{m.line:5}  {m.id}{'  (equivalent)' if m.id in EQUIVALENT else ''}")
        print(f"{len(chosen)} mutants", file=sys.stderr)
        return 0

    defined = set(re.findall(r"^class (\w+)\(", TESTS.read_text(), re.M))
    covering = {part: [c for c in classes if c in defined] for part, classes in COVERING.items()}
    base = Path(tempfile.mkdtemp(prefix="mom_events_mutate_"))
    slots = [_slot(base, n) for n in range(args.jobs)]
    free = list(slots)
    cover = {} if args.classes else {name: t for name, t in coverage_map(slots[0], source).items() if t["ok"]}

    def plan(mutant: Mutant) -> tuple[list[str], dict[str, float] | float]:
        """The tests to run on a mutant, and their time limits: a test may take
        10 s plus four times what it took in the map's run (under its trace)."""
        if args.classes:
            return covering[mutant.part], float(args.timeout or 60)
        tests = tests_for(mutant.function, cover)
        if mutant.in_default:  # read without a call, by the test of the documented signatures
            tests += [t for t in cover if t.startswith("DocumentedSignatureTest.") and t not in tests]
        if args.timeout:
            return tests, float(args.timeout)
        return tests, {t: 10 + 4 * cover[t]["seconds"] for t in tests}

    baseline_src = ast.unparse(ast.parse(source))
    results: dict[str, list] = collections.defaultdict(list)
    survivors: list[tuple[Mutant, str]] = []
    started = time.monotonic()
    pool = None

    def one(mutant: Mutant):
        tests, limits = plan(mutant)
        if not tests:
            return mutant, ("uncovered", 0.0)  # no test runs its function: it survives
        slot = free.pop()
        try:
            return mutant, run_tests(slot, mutated_source(source, mutant), tests, limits)
        finally:
            free.append(slot)

    try:
        print(f"{len(to_run)} mutants to run ({len(everything)} in all), {args.jobs} at a time", file=sys.stderr)
        for part in sorted({m.part for m in to_run} if args.classes else ()):  # the unmutated module must pass
            outcome, seconds = run_tests(slots[0], baseline_src, covering[part], 600.0)
            print(f"baseline {part}: {outcome} in {seconds:.1f} s", file=sys.stderr)
            if outcome != "survived":
                print(f"the tests for {part} fail without a mutant: fix that first", file=sys.stderr)
                return 2
        pool = ThreadPoolExecutor(args.jobs)
        for done, (mutant, (outcome, seconds)) in enumerate(pool.map(one, to_run), 1):
            results[mutant.part].append("survived" if outcome == "uncovered" else outcome)
            if outcome in ("survived", "uncovered"):
                survivors.append((mutant, outcome))
            print(f"[{done}/{len(to_run)} {time.monotonic() - started:.0f}s] {outcome:8} {seconds:5.1f}s "
                  f"{mutant.line}: {mutant.id}", file=sys.stderr, flush=True)
        pool.shutdown()
    except KeyboardInterrupt:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        for proc in list(RUNNING.values()):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        raise
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(f"mom_events mutation run: {len(to_run)} mutants"
          f"{f' (a sample, seed {args.seed})' if args.sample is not None else ''}, "
          f"{time.monotonic() - started:.0f} s, {args.jobs} processes\n")
    print(_table(results, equivalent))
    if args.list_survivors:
        print("\nSurvivors:")
        for m, outcome in survivors:
            print(f"  {m.line:5}  {m.id}{'  (no test runs it)' if outcome == 'uncovered' else ''}")
        names = [m for m in chosen if m.id in EQUIVALENT]
        if names:
            print("\nEquivalent (excluded):")
            for m in names:
                print(f"  {m.line:5}  {m.id}\n         {EQUIVALENT[m.id]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
