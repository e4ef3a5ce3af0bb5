"""Shared fixtures for shunt's integration tests.

Everything here is python3 stdlib + pytest.  The tests run real programs
under ``build/shunt run -- PROGRAM ...`` and compare them with the same
programs run directly.

Fixtures: shunt_build (the build dir), shunt (how to run things under
shunt: .cmd(argv), .run(argv)), port (a free port), start_server (processes
in their own process group, stopped by pid in teardown), builds (the echo
peers of tests/programs, compiled once per session).  Helpers live in
shunttest.py (processes, ports, /proc maps, ELF) and echopeers.py (the
echo programs and their checks).

Environment:
  SHUNT_BUILD          build directory holding ``shunt`` and ``libshunt.so``
                       (default: <repo>/build)
  SHUNT_TEST_TIMEOUT   per-test watchdog in seconds (default 300)
  CI                   set (CI=true): a test that misses a tool fails instead
                       of skipping (shunttest.missing, need_tool)

Time bounds: every subprocess call here has a timeout, every socket a
timeout, and an autouse watchdog (SIGALRM) fails a test that runs longer
than SHUNT_TEST_TIMEOUT.  Processes are started in their own session /
process group and are always ended by pid in teardown, including any
children they left in their group.
"""


import os
import signal
import sys
import threading
from pathlib import Path

import pytest

# The helper modules beside this file (also under --import-mode=importlib).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from echopeers import Builds
from shunttest import LIBNAME, Server, Shunt, build_dir, free_port
# Missing tools skip, or fail under CI (see shunttest.py): the hooks.
from shunttest import pytest_configure, pytest_runtest_makereport, pytest_runtest_setup  # noqa: F401


@pytest.fixture(scope="session")
def shunt_build():
    """Path of the build directory (SHUNT_BUILD, default <repo>/build)."""
    b = build_dir()
    missing = [p.name for p in (b / "shunt", b / LIBNAME) if not p.exists()]
    if missing:
        pytest.fail("%s missing in %s: run `make` at the top of the repository "
                    "(or set SHUNT_BUILD)" % (", ".join(missing), b), pytrace=False)
    return b


@pytest.fixture(scope="session")
def shunt(shunt_build):
    return Shunt(shunt_build)


@pytest.fixture
def port():
    """A free TCP port on 127.0.0.1."""
    return free_port()


@pytest.fixture
def start_server(tmp_path):
    """start_server(argv, cwd=None, env=None, name=None) -> Server.

    The process runs in its own process group; teardown always stops it
    (SIGTERM, then SIGKILL, by pid) together with anything left in its
    group."""
    servers = []
    logdir = tmp_path / "server-logs"
    logdir.mkdir(exist_ok=True)

    def start(argv, cwd=None, env=None, name=None):
        s = Server(argv, cwd, env, logdir, name or "server%d" % len(servers))
        servers.append(s)
        return s

    yield start
    for s in reversed(servers):
        s.stop()


@pytest.fixture(scope="session")
def builds(tmp_path_factory):
    """The echo peers (echopeers.Builds), compiled once per session into a
    temporary directory on first use."""
    return Builds(tmp_path_factory.mktemp("peer-bin"))


@pytest.fixture(scope="session")
def corpus_cache():
    """A directory for what the corpus's programs share over the session
    (a PostgreSQL cluster made once by initdb, programs built once): under
    /tmp, mode 0755, so that entries running as another user can read it;
    removed at the end."""
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="shunt-corpus-cache-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------- watchdog

class WatchdogTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _watchdog():
    """Fail a test that runs longer than SHUNT_TEST_TIMEOUT seconds (its
    fixtures' teardown still runs and stops its processes)."""
    limit = float(os.environ.get("SHUNT_TEST_TIMEOUT", "300"))
    if threading.current_thread() is not threading.main_thread() or limit <= 0:
        yield
        return

    def fire(signum, frame):
        raise WatchdogTimeout("test exceeded %ss (SHUNT_TEST_TIMEOUT)" % limit)

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
