"""Programs that do not use sockets behave identically under shunt.

Each test runs the same command twice, directly and as
``build/shunt run -- COMMAND``, from identical copies of the same working
directory, and requires the same exit status, the same stdout and the same
stderr (and, where the command writes files, the same files).
"""

import hashlib
import os
import random
import shutil
import signal
import tempfile
import textwrap
from pathlib import Path

import pytest

from shunttest import PYTHON, base_env, run_cmd

# Deterministic output from coreutils whatever the caller's locale/timezone.
ENV = {"LC_ALL": "C", "TZ": "UTC"}
FIXED_MTIME = 1_600_000_000  # 2020-09-13


def show(b, limit=1500):
    s = b.decode("utf-8", "replace")
    return s if len(s) <= limit else s[:limit] + "...[%d more chars]" % (len(s) - limit)


def tree_snapshot(root):
    """{relative path: bytes or symlink target} of the files under root."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                snap[rel] = ("link", os.readlink(p))
            elif p.is_file():
                snap[rel] = ("file", p.read_bytes())
            else:
                snap[rel] = ("dir", None)
    return snap


@pytest.fixture
def workdir(tmp_path):
    """A directory of input files with fixed contents and mtimes."""
    d = tmp_path / "template"
    d.mkdir()
    rng = random.Random(1234)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    (d / "words.txt").write_text(
        "".join(rng.choice(words) + "\n" for _ in range(5000)))
    (d / "numbers.txt").write_text(
        "".join("%d\n" % rng.randint(-10**6, 10**6) for _ in range(3000)))
    (d / "hello.txt").write_text("hello, world\nsecond line\n\nlast line without newline")
    (d / "empty.txt").write_bytes(b"")
    (d / "random.bin").write_bytes(rng.randbytes(1 << 20))
    # A generated multi-MiB file for sha256sum.
    block = hashlib.sha256(b"shunt").digest() * 4096  # 128 KiB
    (d / "big.bin").write_bytes(b"".join(
        hashlib.sha256(b"%d" % i).digest()[:8] + block[8:] for i in range(48)))  # 6 MiB
    sub = d / "subdir"
    sub.mkdir()
    (sub / "a.txt").write_text("a\n")
    (sub / "b.txt").write_text("bb\n")
    os.symlink("hello.txt", d / "link-to-hello")
    for p in sorted(d.rglob("*"), reverse=True):
        os.utime(p, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    os.utime(d, (FIXED_MTIME, FIXED_MTIME))
    return d


def compare(shunt, argv, tmp_path, template=None, input=None, timeout=60, check_files=True):
    """Run argv plainly and under shunt, each from its own copy of template
    (or from tmp_path if None); assert identical results; return the plain
    CompletedProcess."""
    env = base_env(**ENV)
    runs = {}
    dirs = {}
    for mode in ("plain", "shunt"):
        if template is not None:
            cwd = Path(tempfile.mkdtemp(prefix="cwd-%s-" % mode, dir=tmp_path))
            shutil.copytree(template, cwd, symlinks=True, dirs_exist_ok=True)
        else:
            cwd = tmp_path
        dirs[mode] = cwd
        cmd = argv if mode == "plain" else shunt.cmd(argv)
        runs[mode] = run_cmd(cmd, timeout=timeout, input=input, cwd=cwd, env=env)
    p, s = runs["plain"], runs["shunt"]
    what = "command %r" % (argv,)
    assert s.returncode == p.returncode, (
        "%s: exit status %r plain vs %r under shunt\nshunt stderr: %s"
        % (what, p.returncode, s.returncode, show(s.stderr)))
    assert s.stdout == p.stdout, (
        "%s: stdout differs\n--- plain ---\n%s\n--- shunt ---\n%s"
        % (what, show(p.stdout), show(s.stdout)))
    assert s.stderr == p.stderr, (
        "%s: stderr differs\n--- plain ---\n%s\n--- shunt ---\n%s"
        % (what, show(p.stderr), show(s.stderr)))
    if template is not None and check_files:
        a, b = tree_snapshot(dirs["plain"]), tree_snapshot(dirs["shunt"])
        assert a.keys() == b.keys(), "%s: different files written" % what
        for k in a:
            assert a[k] == b[k], "%s: file %s differs" % (what, k)
    return p


# ------------------------------------------------------------------ sanity

def test_libshunt_is_loaded_under_shunt(shunt):
    """The comparisons below only mean something if shunt really preloads
    the library: a program run under shunt sees libshunt.so in its maps."""
    r = shunt.run(["grep", "-c", "libshunt.so", "/proc/self/maps"], timeout=30)
    assert r.returncode == 0 and int(r.stdout) >= 1, (r.returncode, show(r.stdout), show(r.stderr))
    r = run_cmd(["grep", "-c", "libshunt.so", "/proc/self/maps"], timeout=30)
    assert r.stdout.strip() == b"0"


def test_launcher_with_and_without_double_dash(shunt):
    with_dd = run_cmd([shunt.bin, "run", "--", "echo", "-n", "hi there"], timeout=30)
    assert (with_dd.returncode, with_dd.stdout) == (0, b"hi there"), show(with_dd.stderr)
    without = run_cmd([shunt.bin, "run", "echo", "hi", "there"], timeout=30)
    assert (without.returncode, without.stdout) == (0, b"hi there\n"), show(without.stderr)
    # a "--" after the program name belongs to the program
    r = run_cmd([shunt.bin, "run", "--", "echo", "--", "-n", "x"], timeout=30)
    assert (r.returncode, r.stdout) == (0, b"-- -n x\n"), show(r.stderr)
    r = run_cmd([shunt.bin, "run", "echo", "--", "y"], timeout=30)
    assert (r.returncode, r.stdout) == (0, b"-- y\n"), show(r.stderr)


@pytest.mark.parametrize("status", [0, 1, 42, 255])
def test_exit_status_propagates(shunt, tmp_path, status):
    compare(shunt, ["sh", "-c", "exit %d" % status], tmp_path)


def test_death_by_signal_propagates(shunt, tmp_path):
    p = compare(shunt, ["sh", "-c", "echo before; kill -TERM $$; echo after"], tmp_path)
    assert p.returncode == -signal.SIGTERM and p.stdout == b"before\n"


# --------------------------------------------------------------- coreutils

def test_ls_l(shunt, tmp_path, workdir):
    p = compare(shunt, ["ls", "-l", "--time-style=+%Y-%m-%d", str(workdir)], tmp_path)
    assert b"words.txt" in p.stdout and b"link-to-hello -> hello.txt" in p.stdout
    compare(shunt, ["ls", "-lAR", "--time-style=+%Y-%m-%d", "."], tmp_path, template=workdir)


def test_cat(shunt, tmp_path, workdir):
    p = compare(shunt, ["cat", "hello.txt", "empty.txt", "random.bin", "subdir/a.txt"],
                tmp_path, template=workdir)
    expect = b"".join((workdir / n).read_bytes()
                      for n in ("hello.txt", "empty.txt", "random.bin", "subdir/a.txt"))
    assert p.stdout == expect
    # stdin -> stdout through a pipe, several MiB
    data = (workdir / "big.bin").read_bytes()
    p = compare(shunt, ["cat"], tmp_path, input=data)
    assert p.stdout == data
    # missing file: same message, same status
    p = compare(shunt, ["cat", "hello.txt", "no-such-file"], tmp_path, template=workdir)
    assert p.returncode == 1


@pytest.mark.parametrize("args", [[], ["-r"], ["-u"], ["-n"], ["-k1,1", "-s"]])
def test_sort(shunt, tmp_path, workdir, args):
    name = "numbers.txt" if "-n" in args else "words.txt"
    data = (workdir / name).read_bytes()
    p = compare(shunt, ["sort"] + args, tmp_path, input=data)
    assert len(p.stdout) > 0


def test_wc(shunt, tmp_path, workdir):
    p = compare(shunt, ["wc", "words.txt", "numbers.txt", "hello.txt", "random.bin", "empty.txt"],
                tmp_path, template=workdir)
    assert b" 5000 " in p.stdout
    compare(shunt, ["wc", "-l"], tmp_path, input=(workdir / "words.txt").read_bytes())


def test_sha256sum(shunt, tmp_path, workdir):
    p = compare(shunt, ["sha256sum", "big.bin", "random.bin"], tmp_path, template=workdir)
    want = hashlib.sha256((workdir / "big.bin").read_bytes()).hexdigest()
    assert p.stdout.split()[0].decode() == want


SH_SCRIPTS = {
    "pipeline_redirect": "sort < words.txt | uniq -c | sort -k1,1nr -k2 > counts.txt; "
                         "head -n 3 counts.txt; wc -l < counts.txt",
    "stderr_redirect": "cat no-such-file 2> err.txt; echo rc=$?; cat err.txt; "
                       "ls no-such-dir >> err.txt 2>&1; echo rc=$?; wc -l < err.txt",
    "extra_fd": "exec 3> fd3.txt; echo to-fd3 >&3; echo more >&3; exec 3>&-; "
                "cat fd3.txt; exec 4< hello.txt; read line <&4; echo \"got: $line\"",
    "stderr_to_pipe": "(echo out; echo err >&2) 2>&1 | tr a-z A-Z",
    "append_and_tee": "for i in 1 2 3; do echo line$i >> log.txt; done; "
                      "cat log.txt | tee copy.txt | wc -c; cmp log.txt copy.txt && echo same",
    "here_doc": "cat <<EOF | sort -r\nzulu\nalpha\nmike\nEOF",
    "sigpipe_producer": "yes shunt | head -n 100000 | wc -l",
    "subshells_and_status": "(exit 3); echo $?; false || echo or-branch; "
                            "true && echo and-branch; x=$(echo nested $(echo deeper)); echo $x",
    "background_jobs": "(sleep 0.2; echo bg1) & (echo bg2 > bg2.txt) & wait; cat bg2.txt",
    "fail_status": "sort words.txt > /dev/null; grep -q nothing-like-this words.txt",
}


@pytest.mark.parametrize("name", sorted(SH_SCRIPTS))
def test_sh_pipelines(shunt, tmp_path, workdir, name):
    compare(shunt, ["sh", "-c", SH_SCRIPTS[name]], tmp_path, template=workdir)


# --------------------------------------------------------------- python

PY_SCRIPT = textwrap.dedent(r'''
    import concurrent.futures, hashlib, json, os, queue, select, selectors
    import signal, subprocess, sys, threading, time

    out = []
    def emit(*a):
        out.append(" ".join(str(x) for x in a))

    # file I/O: write, append, seek, read back, rename, walk, json
    os.makedirs("pydata/nested", exist_ok=True)
    with open("pydata/a.bin", "wb") as f:
        for i in range(1000):
            f.write(hashlib.sha256(b"%d" % i).digest())
    with open("pydata/a.bin", "r+b") as f:
        f.seek(4096)
        f.write(b"X" * 100)
        f.seek(0, 2)
        emit("size", f.tell())
        f.seek(4090)
        emit("slice", f.read(16).hex())
    with open("pydata/log.txt", "a") as f:
        f.write("one\n")
    with open("pydata/log.txt", "a") as f:
        f.write("two\n")
    os.rename("pydata/log.txt", "pydata/nested/log.txt")
    with open("pydata/state.json", "w") as f:
        json.dump({"k": [1, 2, 3], "s": "text"}, f, sort_keys=True)
    with open("pydata/state.json") as f:
        emit("json", json.load(f))
    for root, dirs, files in sorted(os.walk("pydata")):
        emit("walk", root, sorted(dirs), sorted(files))
    emit("sha", hashlib.sha256(open("pydata/a.bin", "rb").read()).hexdigest())

    # select / poll / epoll on pipes
    r, w = os.pipe()
    emit("select-empty", select.select([r], [], [], 0)[0] == [])
    os.write(w, b"ping")
    emit("select-ready", select.select([r], [], [], 5)[0] == [r])
    p = select.poll()
    p.register(r, select.POLLIN)
    emit("poll", [(fd == r, ev & select.POLLIN != 0) for fd, ev in p.poll(5000)])
    emit("read", os.read(r, 100))
    emit("poll-empty", p.poll(0))
    sel = selectors.DefaultSelector()
    sel.register(r, selectors.EVENT_READ)
    def later():
        time.sleep(0.05)
        os.write(w, b"pong")
    t = threading.Thread(target=later)
    t.start()
    ev = sel.select(timeout=5)
    t.join()
    emit("selector", len(ev), os.read(r, 100))
    os.close(w)
    emit("poll-hup", [(ev & (select.POLLHUP | select.POLLIN)) != 0 for fd, ev in p.poll(5000)])
    emit("eof", os.read(r, 100))
    sel.close()
    os.close(r)

    # subprocess spawning
    cp = subprocess.run(["sh", "-c", "echo child-out; echo child-err >&2; exit 5"],
                        capture_output=True, timeout=30)
    emit("sub", cp.returncode, cp.stdout, cp.stderr)
    cp = subprocess.run([sys.executable, "-c", "import sys; print(sum(range(10**5)))"],
                        capture_output=True, timeout=30)
    emit("sub-py", cp.returncode, cp.stdout)
    pr = subprocess.Popen(["sort", "-r"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    o, _ = pr.communicate(b"a\nc\nb\n", timeout=30)
    emit("popen", pr.returncode, o)
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    emit("fork", os.WEXITSTATUS(os.waitpid(pid, 0)[1]))

    # threads
    def work(n):
        h = hashlib.sha256()
        for i in range(n):
            h.update(b"%d" % i)
        return h.hexdigest()[:16]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        emit("pool", list(ex.map(work, [1000, 2000, 3000, 4000, 5000])))
    q = queue.Queue()
    lock = threading.Lock()
    counter = [0]
    def producer(k):
        for i in range(1000):
            with lock:
                counter[0] += 1
            q.put(k * 1000 + i)
    ts = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    items = sorted(q.get() for _ in range(4000))
    emit("threads", counter[0], items[0], items[-1], sum(items))

    # signals
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    os.kill(os.getpid(), signal.SIGUSR1)
    emit("signal", got == [signal.SIGUSR1])

    print("\n".join(out))
    sys.stderr.write("done\n")
    sys.exit(3)
''')


def test_python_script(shunt, tmp_path):
    tpl = tmp_path / "pytemplate"
    tpl.mkdir()
    (tpl / "script.py").write_text(PY_SCRIPT)
    p = compare(shunt, [PYTHON, "script.py"], tmp_path, template=tpl, timeout=120)
    assert p.returncode == 3 and p.stderr == b"done\n"
    assert b"sub 5 b'child-out\\n' b'child-err\\n'" in p.stdout
    assert b"threads 4000" in p.stdout


# --------------------------------------------------------------- gcc

HELLO_C = r'''
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    printf("hello, world\n");
    for (int i = 1; i < argc; i++) printf("arg%d=%s len=%zu\n", i, argv[i], strlen(argv[i]));
    fprintf(stderr, "to stderr\n");
    return 3;
}
'''


@pytest.mark.needs_tool("gcc")
def test_gcc_compile_and_run(shunt, tmp_path):
    """gcc (and cc1, as, collect2, ld, all under the preload) compiles a
    hello world under shunt; the program behaves the same as one compiled
    without shunt, whether run with or without shunt."""
    src = tmp_path / "hello.c"
    src.write_text(HELLO_C)
    env = base_env(**ENV)
    built = {}
    for mode in ("plain", "shunt"):
        exe = tmp_path / ("hello-" + mode)
        argv = ["gcc", "-O2", "-Wall", "-o", str(exe), str(src)]
        r = run_cmd(argv if mode == "plain" else shunt.cmd(argv), timeout=120, env=env)
        assert r.returncode == 0, "gcc (%s) failed: %s" % (mode, show(r.stderr))
        assert r.stderr == b"", "gcc (%s) printed: %s" % (mode, show(r.stderr))
        built[mode] = exe
    results = set()
    for exe in built.values():
        for under in (False, True):
            argv = [str(exe), "one", "two words"]
            r = run_cmd(shunt.cmd(argv) if under else argv, timeout=30, env=env)
            results.add((r.returncode, r.stdout, r.stderr))
    assert results == {(3, b"hello, world\narg1=one len=3\narg2=two words len=9\n",
                        b"to stderr\n")}, results
