#!/usr/bin/env python3
"""The README's example program, as a build step and as a test.

  readme_example.py extract README.md OUT.c
      Write the README's first ```c block to OUT.c (the build compiles and
      runs it: the example must work exactly as printed).
  readme_example.py compare README.md examples/quickstart.c
      Exit 1, with a diff, unless that block is examples/quickstart.c
      byte for byte (one program, one text).
"""
import difflib
import sys


def first_c_block(readme_path):
    """The lines between the first line that is exactly ```c and the next
    line that is exactly ``` (each with its newline)."""
    with open(readme_path, encoding="utf-8") as f:
        lines = f.readlines()
    start = None
    for i, line in enumerate(lines):
        fence = line.rstrip("\n")
        if start is None:
            if fence == "```c":
                start = i + 1
        elif fence == "```":
            return "".join(lines[start:i])
    where = "no line '```c'" if start is None else "the ```c block at line %d never closes" % start
    raise SystemExit("%s: %s" % (readme_path, where))


def main(argv):
    if len(argv) != 4 or argv[1] not in ("extract", "compare"):
        sys.stderr.write(__doc__)
        return 2
    block = first_c_block(argv[2])
    if argv[1] == "extract":
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(block)
        return 0
    with open(argv[3], encoding="utf-8") as f:
        source = f.read()
    if block == source:
        print("the README's example is %s" % argv[3])
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        source.splitlines(True), block.splitlines(True),
        fromfile=argv[3], tofile=argv[2] + " (first ```c block)"))
    print("\nthe README's example differs from %s: make them the same program" % argv[3])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
