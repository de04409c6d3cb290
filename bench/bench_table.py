#!/usr/bin/env python3
"""Markdown tables from the JSON rows `make bench` collects.

  bench_table.py [--bench NAME] RESULTS.jsonl
      Print the tables (of bench NAME only, with --bench) to stdout.
  bench_table.py --update DOC.md RESULTS.jsonl
      Replace the part of DOC.md between the BEGIN and END marker lines
      below with the tables of every benchmark in RESULTS.jsonl; a DOC.md
      without the markers gets them, and the tables, at its end.

RESULTS.jsonl has one JSON object per line (`make bench` writes it): a
{"type":"run"} line (date, kernel, memory, load average), then for each
benchmark its own --json lines, each tagged "bench":"bench_<topic>" (its
header carries the name already), and a {"type":"exit","status":N} line,
then a {"type":"run_end"} line (date, load average).  Each benchmark gets
a heading with its exit status, its header's own fields (CPU, compiler and
commit go to the machine line at the top), one table per kind of row
("row", "stats", "check", ...: the columns are the keys in order of first
appearance; null is an empty cell) and its footer.  A line that is not a
JSON object is reported (file:line) and left out; any such line makes the
exit status 1.
"""
import json
import sys

BEGIN = "<!-- bench-table: begin (make bench-table writes what follows from build/bench-results.jsonl; edits are lost) -->"
END = "<!-- bench-table: end -->"
# Header fields shown once for the whole run, in the machine line.
MACHINE_KEYS = ("cpu", "compiler", "commit", "nproc", "online_cpus")


def load(path, only=None):
    """(run records {"run", "run_end"}, {bench: {"header", "footer", "exit",
    "rows"}} in file order, count of lines that are not JSON objects).  A bad line counts
    for the benchmark of the line before it; with only, only that
    benchmark's are reported and counted."""
    run, benches, bad, current = {}, {}, 0, None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                if only is None or current == only:
                    sys.stderr.write("%s:%d: not a JSON object (%s): %s\n"
                                     % (path, number, e, line.strip()[:120]))
                    bad += 1
                continue
            kind = obj.get("type")
            if kind in ("run", "run_end"):
                run[kind] = obj
                continue
            name = current = obj.get("bench", "(no bench name)")
            b = benches.setdefault(name, {"header": None, "footer": None, "exit": None, "rows": []})
            if kind in ("header", "footer", "exit"):
                b[kind] = obj
            else:
                b["rows"].append(obj)
    return run, benches, bad


def cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        v = json.dumps(v, separators=(",", ":"))
    return str(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def table(rows):
    cols = []
    for r in rows:
        cols.extend(k for k in r if k not in ("type", "bench") and k not in cols)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out


def machine_line(run, benches):
    """One sentence: when, on which CPU, kernel, compiler and commit."""
    def values(key):
        seen = []
        for b in benches.values():
            h = b["header"] or {}
            if key in h and h[key] not in seen:
                seen.append(h[key])
        return ", ".join(str(v) for v in seen) or "?"

    start, end = run.get("run", {}), run.get("run_end", {})
    when = start.get("date", "?")
    if end.get("date") and end["date"] != when:
        when += " to " + end["date"]
    where = "%s (%s CPUs available to the benchmarks, %s online)" % (
        values("cpu"), values("nproc"), values("online_cpus"))
    if start.get("memory"):
        where += ", %s of memory" % start["memory"]
    system = "%s %s" % (start.get("kernel", "?"), start.get("machine", ""))
    line = "`make bench` of %s on %s, %s, %s, commit %s." % (
        when, where, system.strip(), values("compiler"), values("commit"))
    if start.get("load"):
        line += " Load average (1, 5, 15 min) %s at the start" % start["load"]
        line += ", %s at the end." % end["load"] if end.get("load") else "."
    return line


def render(run, benches, only=None):
    out = []
    if only is None:
        out += [machine_line(run, benches), ""]
    for name, b in benches.items():
        if only is not None and name != only:
            continue
        status = b["exit"]["status"] if b["exit"] else None
        out.append("### %s (%s)" % (name, "exit status %s" % status if status is not None else "no exit status"))
        out.append("")
        h = b["header"] or {}
        fields = ["%s: %s" % (k, cell(v)) for k, v in h.items()
                  if k not in MACHINE_KEYS + ("type", "bench", "env")]
        env = h.get("env") or {}
        fields.append("env: " + (", ".join("%s=%s" % (k, cell(v)) for k, v in env.items()) or "none"))
        out += ["* " + f for f in fields] + [""]
        kinds = []
        for r in b["rows"]:
            if r.get("type") not in kinds:
                kinds.append(r.get("type"))
        for kind in kinds:
            rows = [r for r in b["rows"] if r.get("type") == kind]
            if len(kinds) > 1 or kind != "row":
                out += ["rows:" if kind == "row" else "`%s` rows:" % cell(kind), ""]
            out += table(rows) + [""]
        if not b["rows"]:
            out += ["(no rows)", ""]
        if b["footer"]:
            out += ["footer: " + ", ".join("%s %s" % (k, cell(v)) for k, v in b["footer"].items()
                                           if k not in ("type", "bench")), ""]
    if only is not None and only not in benches:
        out.append("(no lines of %s)" % only)
    return out


def update(doc_path, lines):
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read().split("\n")
    section = [BEGIN, ""] + lines + [END]
    if BEGIN in doc or END in doc:
        if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
            raise ValueError("%s: the lines %r and %r must appear once each, in that order"
                             % (doc_path, BEGIN, END))
        doc[doc.index(BEGIN):doc.index(END) + 1] = section
    else:
        while doc and doc[-1] == "":
            doc.pop()
        doc += ["", "## Latest run", ""] + section + [""]
    with open(doc_path, "w", encoding="utf-8") as f:
        f.write("\n".join(doc))


def main(argv):
    args = argv[1:]
    only = doc = None
    if len(args) == 3 and args[0] in ("--bench", "--update"):
        if args[0] == "--bench":
            only = args[1]
        else:
            doc = args[1]
        args = args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    try:
        run, benches, bad = load(args[0], only)
    except OSError as e:
        sys.stderr.write("bench_table.py: %s\n" % e)
        return 1
    lines = render(run, benches, only)
    while lines and lines[-1] == "":
        lines.pop()
    if doc is None:
        print("\n".join(lines))
    else:
        try:
            update(doc, lines)
        except (OSError, ValueError) as e:
            sys.stderr.write("bench_table.py: %s\n" % e)
            return 1
        print("bench_table.py: %s: the tables of %d benchmarks from %s" % (doc, len(benches), args[0]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
