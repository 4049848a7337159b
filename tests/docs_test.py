#!/usr/bin/env python3
"""Checks the C code of the documentation (README.md and docs/*.md) against
the library and the examples, using only the standard library.

    docs_test.py --root SRC --include DIR --lib LIBASYNCRT.a [--cc WORD]...
                 [--cflag FLAG]... [--ldflag FLAG]... [FILE[:LINE]]...

Every ```c block carries exactly one annotation, an HTML comment on the
lines just before it (invisible when the markdown is rendered):

    <!-- test: run -->          a whole program (it has `int main(`): built
                                 and run, exit status 0 expected; lines
                                 between `run` and `-->` are its exact
                                 standard output.
    <!-- test: compile WHY -->  a whole program built but not run (a server,
                                 a program that waits for input): WHY says why.
    <!-- test: fragment         a part of a program, compiled (-c) inside the
    CONTEXT                      hidden context: each line `@@` is replaced by
    -->                          a piece of the block, the pieces being split
                                 at lines `...`; no context: the block alone.
    <!-- test: quotes examples/NAME.c -->
                                 a part of an example: each piece between `...`
                                 lines is a run of consecutive lines of the
                                 file, pieces in the file's order (comments,
                                 blank lines and whitespace do not count).

Blocks are compiled with -std=c11 -Wall -Wextra -Werror, with `#line`
directives so that an error points into the markdown.

Outside the blocks: every path under examples/, src/, include/, tests/,
bench/, scripts/ or docs/ that a document names must exist (or be a program
that its directory's meson.build builds); a line named `PATH:N in FUNC` (a
task dump's await point) must be an await in FUNC (RT_AWAIT, RT_CORO_YIELD,
or a fiber's rt_fiber_await or _await helper), and one named `spawned at
PATH:N` a spawn; and a file name alone in backquotes (`echo_server.c`) must
be one of the project's files. (The code-size tables are scripts/loc's, and
its own test checks them.)

Prints one line per block and per check that fails, then a count; exits 1 on
any failure, 2 on bad usage. FILE[:LINE] arguments limit the check to those
blocks (of a file, or the one whose fence is at that line).
"""
import argparse
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

DOCS = ["README.md", "docs/*.md"]
KINDS = ("run", "compile", "fragment", "quotes")
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"]
RUN_TIMEOUT_S = 60
TREE_DIRS = ("examples", "src", "include", "tests", "bench", "scripts", "docs")

FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
ANNOTATION = re.compile(r"^(\s*)<!--\s*test:(.*)$")


class Block:
    def __init__(self, doc, line, lines, indent):
        self.doc = doc        # the markdown file, relative to the root
        self.line = line      # the line of the opening fence (1-based)
        self.lines = lines    # [(markdown line number, text without the indent)]
        self.indent = indent
        self.kind = None
        self.arg = ""         # what follows the kind on its line
        self.body = []        # [(line number, text)] of the annotation after its first line
        self.problem = None   # why the annotation is wrong

    def where(self):
        return "%s:%d" % (self.doc, self.line)

    def code(self):
        return "\n".join(text for _, text in self.lines)


# The documents whose programs use the diagnostics (task dumps, traces).
DIAGNOSTIC_DOCS = ("docs/debugging.md", "docs/tracing.md")


def dedent(text, indent):
    return text[len(indent):] if text.startswith(indent) else text.lstrip()


def parse(root, doc):
    """The ```c blocks of one file with their annotations, and the problems
    found on the way (annotations before nothing)."""
    lines = (root / doc).read_text().split("\n")
    blocks, problems = [], []
    pending = None  # (first line, last line, indent, lines) of the last annotation
    i = 0
    while i < len(lines):
        text = lines[i]
        m = ANNOTATION.match(text)
        if m:
            start, indent, rest = i, m.group(1), [m.group(2)]
            while "-->" not in rest[-1] and i + 1 < len(lines):
                i += 1
                rest.append(dedent(lines[i], indent))
            if pending is not None:
                problems.append("%s:%d: annotation not followed by a ```c block" % (doc, pending[0] + 1))
            pending = (start, i, indent, rest)
            if "-->" not in rest[-1]:
                problems.append("%s:%d: annotation without its -->" % (doc, start + 1))
                pending = None
            i += 1
            continue
        m = FENCE.match(text)
        if m:
            indent, lang, start = m.group(1), m.group(2), i
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append((i + 1, dedent(lines[i], indent)))
                i += 1
            if lang == "c":
                block = Block(doc, start + 1, body, indent)
                if pending is not None and pending[1] == start - 1:
                    annotate(block, pending)
                elif pending is not None:
                    block.problem = "its annotation (line %d) must end on the line just before it" % (pending[0] + 1)
                else:
                    block.problem = "no annotation (<!-- test: run | compile | fragment | quotes -->) just before it"
                blocks.append(block)
            elif pending is not None:
                problems.append("%s:%d: annotation not followed by a ```c block" % (doc, pending[0] + 1))
            pending = None
            i += 1
            continue
        if pending is not None and text.strip():
            problems.append("%s:%d: annotation not followed by a ```c block" % (doc, pending[0] + 1))
            pending = None
        i += 1
    if pending is not None:
        problems.append("%s:%d: annotation not followed by a ```c block" % (doc, pending[0] + 1))
    return blocks, problems


def annotate(block, annotation):
    start, _, _, rest = annotation
    rest = list(rest)
    rest[-1] = rest[-1][: rest[-1].index("-->")]
    words = rest[0].split(None, 1)
    block.kind = words[0] if words else ""
    block.arg = words[1].strip() if len(words) > 1 else ""
    block.body = [(start + 1 + n, text) for n, text in enumerate(rest[1:], start=1)]
    if block.body and not block.body[-1][1].strip():
        block.body.pop()  # the line of the closing -->
    whole = re.search(r"\bint\s+main\s*\(", block.code()) is not None
    if block.kind not in KINDS:
        block.problem = "unknown annotation %r: one of %s" % (block.kind, ", ".join(KINDS))
    elif block.kind in ("run", "compile") and not whole:
        block.problem = "%s: not a whole program (no `int main(`)" % block.kind
    elif block.kind in ("fragment", "quotes") and whole:
        block.problem = "a whole program (it has `int main(`): run or compile it"
    elif block.kind == "compile" and not block.arg:
        block.problem = "compile: say why it is not run"
    elif block.kind == "quotes" and not re.fullmatch(r"examples/([\w.-]+/)?[\w.-]+\.c", block.arg):
        block.problem = "quotes: needs examples/NAME.c"
    elif block.kind in ("compile", "quotes") and block.body:
        block.problem = "%s: takes one line" % block.kind
    elif block.kind == "run" and block.arg:
        block.problem = "run: the expected output goes on the lines after `run`"
    elif block.kind == "fragment" and block.arg:
        block.problem = "fragment: the context goes on the lines after `fragment`"


def pieces(lines):
    """[(line number, text)] split at its `...` lines (whose code, without
    comments, is `...`)."""
    out = [[]]
    for (number, text), code in zip(lines, strip_comments([text for _, text in lines])):
        if code.strip() == "...":
            out.append([])
        else:
            out[-1].append((number, text))
    return out


def strip_comments(lines):
    """The lines with their C comments removed (block comments may span
    lines), string and character literals kept."""
    out, in_comment = [], False
    for text in lines:
        code, i = [], 0
        while i < len(text):
            if in_comment:
                end = text.find("*/", i)
                if end < 0:
                    i = len(text)
                else:
                    in_comment, i = False, end + 2
                    code.append(" ")
            elif text.startswith("/*", i):
                in_comment, i = True, i + 2
            elif text.startswith("//", i):
                break
            elif text[i] in "\"'":
                quote, j = text[i], i + 1
                while j < len(text) and text[j] != quote:
                    j += 2 if text[j] == "\\" else 1
                code.append(text[i : j + 1])
                i = j + 1
            else:
                code.append(text[i])
                i += 1
        out.append("".join(code))
    return out


def normal(code):
    return " ".join(code.split())


def source(block):
    """The translation unit of a block, with #line directives into the markdown."""
    parts = pieces(block.lines)
    if block.kind == "fragment" and block.body:
        holes = [n for n, text in block.body if text.strip() == "@@"]
        if len(holes) != len(parts):
            raise ValueError("the context has %d `@@` for %d piece(s) of the block (split at `...`)"
                             % (len(holes), len(parts)))
        segments, context, k = [], [], 0
        for number, text in block.body:
            if text.strip() == "@@":
                segments.append(context)
                segments.append(parts[k])
                context, k = [], k + 1
            else:
                context.append((number, text))
        segments.append(context)
    else:
        if len(parts) > 1:
            raise ValueError("`...` lines in a block to compile: a fragment's context takes one `@@` per piece")
        segments = [parts[0]]
    out = []
    for segment in segments:
        if segment:
            out.append('#line %d "%s"' % (segment[0][0], block.doc))
            last = segment[0][0] - 1
            for number, text in segment:
                if number != last + 1:
                    out.append('#line %d "%s"' % (number, block.doc))
                out.append(text)
                last = number
    return "\n".join(out) + "\n"


def check_quote(root, block):
    path = root / block.arg
    if not path.is_file():
        return "no such file: " + block.arg
    file_lines = [normal(c) for c in strip_comments(path.read_text().split("\n"))]
    file_code = [(n + 1, c) for n, c in enumerate(file_lines) if c]
    block_code = strip_comments([text for _, text in block.lines])
    pos = 0
    for piece in pieces(list(zip([n for n, _ in block.lines], block_code))):
        want = [(n, normal(c)) for n, c in piece if normal(c)]
        if not want:
            continue
        found = None
        for start in range(pos, len(file_code) - len(want) + 1):
            if all(file_code[start + k][1] == want[k][1] for k in range(len(want))):
                found = start
                break
        if found is None:
            # Name the first line of the piece that is not where it should be.
            best, first_bad = 0, want[0]
            for start in range(pos, len(file_code)):
                k = 0
                while k < len(want) and start + k < len(file_code) and file_code[start + k][1] == want[k][1]:
                    k += 1
                if k > best:
                    best, first_bad = k, want[k] if k < len(want) else want[-1]
            if best:
                why = "does not follow the line before it in " + block.arg
            else:
                why = "is not in %s%s" % (block.arg, " after the previous piece" if pos else "")
            return "%s:%d %s: %s" % (block.doc, first_bad[0], why, first_bad[1])
        pos = found + len(want)
    return None


def compile_block(block, args, tmp):
    """None when the block passes, else what went wrong."""
    try:
        text = source(block)
    except ValueError as e:
        return str(e)
    name = "%s_%d" % (re.sub(r"\W", "_", block.doc), block.line)
    c_file = os.path.join(tmp, name + ".c")
    with open(c_file, "w") as f:
        f.write(text)
    cmd = args.cc + FLAGS + args.cflag + ["-I", args.include]
    if block.kind == "fragment":
        cmd += ["-c", c_file, "-o", os.path.join(tmp, name + ".o")]
    else:
        cmd += [c_file, "-o", os.path.join(tmp, name), args.lib] + args.ldflag
    built = subprocess.run(cmd, cwd=args.root, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if built.returncode != 0:
        return "compiler said:\n" + (built.stdout + built.stderr).rstrip()
    if block.kind != "run":
        return None
    if args.no_diagnostics and block.doc in DIAGNOSTIC_DOCS:
        return None  # a library built without diagnostics: built, not run
    try:
        ran = subprocess.run([os.path.join(tmp, name)], cwd=tmp, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "still running after %d s" % RUN_TIMEOUT_S
    if ran.returncode != 0:
        return "exit status %d; output:\n%s" % (ran.returncode, (ran.stdout + ran.stderr).rstrip())
    if block.body:
        want = [text.rstrip() for _, text in block.body]
        got = [line.rstrip() for line in ran.stdout.rstrip("\n").split("\n")]
        if got != want:
            return "printed:\n%s\ninstead of:\n%s" % ("\n".join(got), "\n".join(want))
    return None


def check_block(block, args, tmp):
    if block.problem is not None:
        return block.problem
    if block.kind == "quotes":
        return check_quote(pathlib.Path(args.root), block)
    return compile_block(block, args, tmp)


# ---- Text outside the blocks --------------------------------------------------

def prose(root, doc):
    """[(line number, text)] of every line of a file: paths named in its
    commands and outputs must exist too."""
    return list(enumerate((root / doc).read_text().split("\n"), start=1))


def project_files(root):
    names = set()
    for d in TREE_DIRS:
        for p in (root / d).rglob("*"):
            if p.is_file():
                names.add(p.name)
    return names


def exists(root, path):
    """A file or directory of the tree (`a/b.c/.h`: both, `*`: any), or a
    program that the meson.build of its directory builds."""
    if path.endswith(".c/.h"):
        return exists(root, path[:-2]) and exists(root, path[:-4] + "h")
    if "*" in path:
        return any(root.glob(path))
    if (root / path).exists():
        return True
    build = root / os.path.dirname(path) / "meson.build"
    return build.is_file() and re.search(r"executable\(\s*'%s'" % re.escape(os.path.basename(path)),
                                         build.read_text()) is not None


def function_at(lines, n):
    """The name of the function whose definition line comes last before line n."""
    for text in reversed(lines[:n]):
        m = re.match(r"^[A-Za-z_][\w \t*]*?\b(\w+)\s*\(", text)
        if m and not text.rstrip().endswith(";"):
            return m.group(1)
    return None


def check_line(root, path, n, function, spawn):
    """None when line n of path is what the text says: an await point of
    `function`, a spawn, or just a line of the file."""
    lines = (root / path).read_text().split("\n")
    if not 1 <= n <= len(lines):
        return "%s has no line %d" % (path, n)
    text = lines[n - 1]
    if function is not None:
        if not re.search(r"\bRT_(AWAIT\w*|YIELD)\s*\(|\brt_\w+_await\s*\(|"
                         r"\brt_fiber_(await\w*|yield|serve|run_blocking)\s*\(", text):
            return "line %d of %s is no await point: %s" % (n, path, text.strip())
        if function_at(lines, n) != function:
            return "line %d of %s is in %s, not %s" % (n, path, function_at(lines, n), function)
    if spawn and not re.search(r"\b(rt_spawn\w*|RT_SPAWN_STATE|rt_group_spawn|rt_block_on|"
                               r"rt_fiber_spawn\w*|rt_fiber_block_on|rt_fiber_serve)\s*\(", text):
        return "line %d of %s spawns nothing: %s" % (n, path, text.strip())
    return None


def check_paths(root, doc, names):
    problems = []
    path_re = re.compile(r"(?:(?<=\.\./)|(?<![\w/.-]))((?:%s)/[\w./*-]*[\w/*])(?::(\d+)(?: in (\w+))?)?"
                         % "|".join(TREE_DIRS))
    for n, text in prose(root, doc):
        for m in path_re.finditer(text):
            path = m.group(1)
            if re.search(r"/[A-Z][A-Z_]*(\.\w+)?$", path):
                continue  # a placeholder: examples/NAME.c
            if not exists(root, path):
                problems.append("%s:%d: names %s, which does not exist" % (doc, n, path))
            elif m.group(2) is not None and (root / path).is_file():
                spawn = re.search(r"spawned at (\.\./)*$", text[: m.start(1)]) is not None
                wrong = check_line(root, path, int(m.group(2)), m.group(3), spawn)
                if wrong is not None:
                    problems.append("%s:%d: %s:%s: %s" % (doc, n, path, m.group(2), wrong))
        for m in re.finditer(r"`([\w-]+\.[ch])`", text):
            if m.group(1) not in names:
                problems.append("%s:%d: names `%s`, which is none of the project's files" % (doc, n, m.group(1)))
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, help="the source tree")
    ap.add_argument("--include", required=True, help="the public headers' directory")
    ap.add_argument("--lib", required=True, help="the static library")
    ap.add_argument("--cc", action="append", default=[], help="a word of the compiler's command")
    ap.add_argument("--cflag", action="append", default=[], help="default -pthread")
    ap.add_argument("--ldflag", action="append", default=[], help="after the library; default -pthread")
    ap.add_argument("--no-diagnostics", action="store_true",
                    help="the library is built without diagnostics: the programs of "
                    "docs/debugging.md and docs/tracing.md are built but not run")
    ap.add_argument("only", nargs="*", help="FILE or FILE:LINE: only these blocks")
    args = ap.parse_args()
    args.cc = args.cc or ["cc"]
    args.cflag = args.cflag or ["-pthread"]
    args.ldflag = args.ldflag or ["-pthread"]
    args.root = os.path.abspath(args.root)
    args.include = os.path.abspath(args.include)
    args.lib = os.path.abspath(args.lib)
    root = pathlib.Path(args.root)

    docs = sorted({str(p.relative_to(root)) for pattern in DOCS for p in root.glob(pattern)},
                  key=lambda d: (d != "README.md", d))
    blocks, problems = [], []
    for doc in docs:
        found, wrong = parse(root, doc)
        blocks += found
        problems += wrong
    if args.only:
        blocks = [b for b in blocks if b.doc in args.only or b.where() in args.only]
    else:
        names = project_files(root)
        for doc in docs:
            problems += check_paths(root, doc, names)

    failed = 0
    with tempfile.TemporaryDirectory(prefix="docs_test.") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            results = pool.map(lambda b: check_block(b, args, tmp), blocks)
            for block, error in zip(blocks, results):
                kind = block.kind if block.kind in KINDS else "block"
                if error is None:
                    print("%s %s: ok" % (block.where(), kind))
                else:
                    failed += 1
                    print("%s %s: FAILED: %s" % (block.where(), kind, error))
            sys.stdout.flush()
    for problem in problems:
        print(problem)
    counts = {k: sum(1 for b in blocks if b.kind == k) for k in KINDS}
    print("%d blocks (%s): %d ok, %d failed; %d other problem(s)"
          % (len(blocks), ", ".join("%d %s" % (counts[k], k) for k in KINDS),
             len(blocks) - failed, failed, len(problems)))
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
