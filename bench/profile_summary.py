"""Summarise a py-spy profile of the app server (``py-spy record --format raw``, collapsed
stacks) as a Markdown table: where the samples fall, by function, inclusive of callees.

    python bench/profile_summary.py PROFILE.txt [--top 20] [--seconds S --rate HZ]

With ``--gil`` profiles (only the thread holding the GIL is sampled), the share of all
samples says how busy the app process's one interpreter was.
"""
from __future__ import annotations

import argparse
import collections
import re

FRAME = re.compile(r"(?P<function>.*) \((?P<file>.*):\d+\)$")
# Frames every stack shares (the interpreter, the thread, Streamlit's runner): no information.
SHARED = ("threading.py", "runpy", "click/", "bootstrap.py", "web/cli.py", "streamlit/__main__.py",
          "asyncio/runners.py", "script_runner.py", "exec_code.py")


def frame_name(frame: str) -> str:
    """``function (package/module.py)`` of one collapsed-stack frame."""
    match = FRAME.match(frame)
    if match is None:
        return frame
    return f"{match['function']} ({'/'.join(match['file'].split('/')[-2:])})"


def inclusive(lines) -> tuple[int, collections.Counter]:
    """(samples, samples per frame counting each stack once per frame)."""
    total, counts = 0, collections.Counter()
    for line in lines:
        line = line.rstrip()
        if not line:
            continue
        stack, samples = line.rsplit(" ", 1)
        total += int(samples)
        for name in {frame_name(f) for f in stack.split(";")}:
            counts[name] += int(samples)
    return total, counts


def table(total: int, counts: collections.Counter, top: int, possible: int | None = None) -> str:
    rows = [(name, n) for name, n in counts.most_common() if not any(s in name for s in SHARED)][:top]
    head = f"{total} samples" + (f" of {possible} possible ({100 * total / possible:.0f}%)" if possible else "")
    lines = [head, "", "| function (inclusive) | share of samples |", "| --- | ---: |"]
    lines += [f"| `{name}` | {100 * n / total:.1f}% |" for name, n in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--seconds", type=float, help="how long py-spy sampled")
    parser.add_argument("--rate", type=float, help="py-spy's samples per second")
    args = parser.parse_args()
    with open(args.profile) as lines:
        total, counts = inclusive(lines)
    possible = int(args.seconds * args.rate) if args.seconds and args.rate else None
    print(table(total, counts, args.top, possible))


if __name__ == "__main__":
    main()
