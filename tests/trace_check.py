#!/usr/bin/env python3
"""Checks a trace written by rt_trace_stop (asyncrt/trace.h) for the trace
suite (tests/test_trace.c), using only the standard library.

    trace_check.py TRACE.json [--workers W] [--polls N] [--max-polls N]
                   [--spawns N] [--min-wakes N] [--min-timer-fires N]
                   [--every-wake-flows] [--drops | --no-drops]

Always checked: the file is JSON with a traceEvents list; the tracks are
named "worker 0" .. "worker W-1", "reactor" and "other threads"; on every
track the B and E events, taken in time order (ties in file order, as the
viewers take them), are balanced and properly nested with matching names;
every flow id has one start ("s") at a wake instant and one end ("f",
bound to the enclosing slice) at the beginning of a poll of the same task,
no earlier than the wake. The options add counts to match. Prints a summary
line; exits 1 with the reasons on failure, 2 on bad usage.
"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--polls", type=int, help="exact number of polls on worker tracks")
    ap.add_argument("--max-polls", type=int)
    ap.add_argument("--spawns", type=int, help="exact number of spawn instants")
    ap.add_argument("--min-wakes", type=int, default=0)
    ap.add_argument("--min-timer-fires", type=int, default=0)
    ap.add_argument("--every-wake-flows", action="store_true")
    drops = ap.add_mutually_exclusive_group()
    drops.add_argument("--drops", action="store_true", help="some events must have been dropped")
    drops.add_argument("--no-drops", action="store_true")
    a = ap.parse_args()

    errors = []
    try:
        with open(a.trace) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_check: {a.trace}: not valid JSON: {e}", file=sys.stderr)
        return 1
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        print(f"trace_check: {a.trace}: no traceEvents list", file=sys.stderr)
        return 1

    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    by_name = {v: k for k, v in names.items()}
    wanted = ["reactor", "other threads"]
    if a.workers is not None:
        wanted += [f"worker {i}" for i in range(a.workers)]
    for n in wanted:
        if n not in by_name:
            errors.append(f"no track named {n!r} (tracks: {sorted(names.values())})")
    worker_tids = {t for t, n in names.items() if n.startswith("worker ")}

    # Balance, per track, in time order with ties in file order.
    per_tid = collections.defaultdict(list)
    for i, e in enumerate(events):
        if e.get("ph") in ("B", "E"):
            per_tid[e["tid"]].append((float(e["ts"]), i, e))
    for tid, evs in per_tid.items():
        evs.sort(key=lambda x: (x[0], x[1]))
        stack = []
        for ts, _, e in evs:
            if e["ph"] == "B":
                stack.append(e["name"])
            elif not stack:
                errors.append(f"track {names.get(tid, tid)}: E {e['name']!r} at {ts} without a B")
            elif stack[-1] != e["name"]:
                errors.append(f"track {names.get(tid, tid)}: E {e['name']!r} at {ts} closes {stack[-1]!r}")
                stack.pop()
            else:
                stack.pop()
        if stack:
            errors.append(f"track {names.get(tid, tid)}: {len(stack)} slice(s) never end: {stack}")

    polls = [e for e in events if e.get("ph") == "B" and e.get("cat") == "poll"]
    full_polls = [e for e in polls if "truncated" not in e.get("args", {})]
    if any(e["tid"] not in worker_tids for e in polls):
        errors.append("a poll outside the worker tracks")
    wakes = [e for e in events if e.get("ph") == "i" and e.get("name") == "wake"]
    spawns = [e for e in events if e.get("ph") == "i" and e.get("name") == "spawn"]
    fires = [e for e in events if e.get("ph") == "i" and e.get("name") == "timer fire"]
    parks = [e for e in events if e.get("ph") == "B" and e.get("name") == "park"]

    # Flows: wake instant -> the poll it caused.
    wake_at = {(e["tid"], e["ts"]): e for e in wakes}
    poll_at = collections.defaultdict(list)
    for e in polls:
        poll_at[(e["tid"], e["ts"])].append(e)
    starts, ends = {}, {}
    for e in events:
        if e.get("ph") == "s":
            if e["id"] in starts:
                errors.append(f"flow {e['id']} starts twice")
            starts[e["id"]] = e
        elif e.get("ph") == "f":
            if e["id"] in ends:
                errors.append(f"flow {e['id']} ends twice")
            if e.get("bp") != "e":
                errors.append(f"flow {e['id']} ends without bp 'e'")
            ends[e["id"]] = e
    if set(starts) != set(ends):
        errors.append(f"flows without both ends: {sorted(set(starts) ^ set(ends))[:10]}")
    flowed_wakes = set()
    for fid in set(starts) & set(ends):
        s, f = starts[fid], ends[fid]
        w = wake_at.get((s["tid"], s["ts"]))
        if w is None:
            errors.append(f"flow {fid} starts where no wake is ({names.get(s['tid'])} at {s['ts']})")
            continue
        task = w["args"]["task"]
        if not any(p["args"]["task"] == task for p in poll_at.get((f["tid"], f["ts"]), [])):
            errors.append(f"flow {fid} of task {task} ends where no poll of it begins")
        if float(f["ts"]) < float(s["ts"]):
            errors.append(f"flow {fid} ends before it starts")
        flowed_wakes.add((s["tid"], s["ts"]))

    other = doc.get("otherData", {})
    dropped = other.get("dropped_events")
    if dropped is None:
        errors.append("otherData.dropped_events missing")
    elif a.drops and dropped == 0:
        errors.append("no events dropped, expected some")
    elif a.no_drops and dropped != 0:
        errors.append(f"{dropped} events dropped, expected none")
    if a.drops and not any(e.get("name") == "events dropped" for e in events):
        errors.append("no 'events dropped' instant")

    if a.polls is not None and len(full_polls) != a.polls:
        errors.append(f"{len(full_polls)} polls, expected {a.polls}")
    if a.max_polls is not None and len(polls) > a.max_polls:
        errors.append(f"{len(polls)} polls, expected at most {a.max_polls}")
    if a.spawns is not None and len(spawns) != a.spawns:
        errors.append(f"{len(spawns)} spawns, expected {a.spawns}")
    if len(wakes) < a.min_wakes:
        errors.append(f"{len(wakes)} wakes, expected at least {a.min_wakes}")
    if len(fires) < a.min_timer_fires:
        errors.append(f"{len(fires)} timer fires, expected at least {a.min_timer_fires}")
    if a.every_wake_flows and len(flowed_wakes) != len(wakes):
        errors.append(f"{len(wakes) - len(flowed_wakes)} of {len(wakes)} wakes have no flow")

    print(f"trace_check: {a.trace}: {len(events)} events, {len(polls)} polls, "
          f"{len(wakes)} wakes, {len(starts)} flows, {len(spawns)} spawns, "
          f"{len(fires)} timer fires, {len(parks)} parks, {dropped} dropped")
    if errors:
        for e in errors[:30]:
            print(f"trace_check: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
