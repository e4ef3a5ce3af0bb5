"""python3 -m http.server run under shunt serves files byte-exactly.

The server is ``build/shunt run -- python3 -m http.server PORT --bind ADDR``
started in a temporary directory holding a few files, one of several MiB.
Clients: curl without shunt, curl under shunt, and a stdlib python client
(tests/programs/http_fetch.py) under shunt; also plain python threads
fetching in parallel.  Every body is compared with the file on disk.
"""

import concurrent.futures
import hashlib
import urllib.error
import urllib.parse
import urllib.request

import pytest

from shunttest import PROGRAMS, PYTHON, free_port, needs_ipv6, run_cmd

FILES = {
    "small.txt": b"hello from shunt\n",
    "empty.txt": b"",
    "data.json": b'{"key": [1, 2, 3], "text": "' + b"x" * 5000 + b'"}\n',
    "name with spaces.txt": b"spaces in the name\n" * 10,
    "sub/nested.bin": bytes(range(256)) * 1000,
}
BIG = "big.bin"
BIG_SIZE = 6 * 1024 * 1024 + 12345  # several MiB, not a multiple of any buffer size

needs_curl = pytest.mark.needs_tool("curl")


def big_content():
    out = bytearray()
    i = 0
    while len(out) < BIG_SIZE:
        out += hashlib.sha512(b"block %d" % i).digest()
        i += 1
    return bytes(out[:BIG_SIZE])


@pytest.fixture(scope="module")
def content():
    c = dict(FILES)
    c[BIG] = big_content()
    return c


@pytest.fixture
def site(tmp_path, content):
    d = tmp_path / "site"
    for name, data in content.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return d


def start_http(shunt, start_server, site, host="127.0.0.1"):
    port = free_port(host)
    srv = start_server(shunt.cmd([PYTHON, "-m", "http.server", str(port), "--bind", host]),
                       cwd=site, name="http.server")
    srv.wait_port(port, host=host, timeout=30)
    url_host = "[%s]" % host if ":" in host else host
    return srv, "http://%s:%d" % (url_host, port)


@pytest.fixture
def http_server(shunt, start_server, site):
    """(Server, base URL) of a shunt'd http.server on 127.0.0.1."""
    return start_http(shunt, start_server, site)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def curl_fetch(argv_prefix, url, out, timeout=60):
    """curl URL into out; returns (CompletedProcess, http_code)."""
    r = run_cmd(argv_prefix + ["curl", "-sS", "-g", "--noproxy", "*", "--max-time", "50",
                               "-o", str(out), "-w", "%{http_code}", url], timeout=timeout)
    return r, r.stdout.decode().strip()


def url_of(base, name):
    return base + "/" + urllib.parse.quote(name)


# ------------------------------------------------------------------ tests

def test_server_process_has_libshunt(http_server):
    srv, _ = http_server
    found = srv.processes_with_libshunt()
    assert found, "libshunt.so not in /proc/PID/maps of the shunt'd server group:\n" + srv.describe()
    assert any("python" in exe for exe in found.values()), found


@needs_curl
def test_curl_plain_client(http_server, content, tmp_path):
    srv, base = http_server
    for name, data in content.items():
        out = tmp_path / "dl.bin"
        r, code = curl_fetch([], url_of(base, name), out)
        assert r.returncode == 0 and code == "200", (name, r.returncode, code, r.stderr, srv.describe())
        got = out.read_bytes()
        assert len(got) == len(data) and got == data, "%s: %d bytes, expected %d" % (
            name, len(got), len(data))


@needs_curl
def test_curl_status_codes_and_listing(http_server, tmp_path):
    srv, base = http_server
    out = tmp_path / "x"
    r, code = curl_fetch([], base + "/no-such-file", out)
    assert r.returncode == 0 and code == "404", (code, r.stderr)
    r, code = curl_fetch([], base + "/", out)
    assert code == "200", (code, r.stderr)
    listing = out.read_bytes()
    for name in ("small.txt", "big.bin", "sub/", "name%20with%20spaces.txt"):
        assert name.encode() in listing, name
    r = run_cmd(["curl", "-sS", "--noproxy", "*", "--max-time", "20", "-I", base + "/" + BIG],
                timeout=30)
    assert r.returncode == 0 and b"Content-Length: %d" % BIG_SIZE in r.stdout, r.stdout


@needs_curl
def test_curl_under_shunt(shunt, http_server, content, tmp_path):
    """Both ends intercepted: curl under shunt against the shunt'd server."""
    srv, base = http_server
    for name, data in content.items():
        out = tmp_path / "dl.bin"
        r, code = curl_fetch(shunt.cmd([]), url_of(base, name), out)
        assert r.returncode == 0 and code == "200", (name, r.returncode, code, r.stderr, srv.describe())
        assert out.read_bytes() == data, name
    # several URLs on one curl command line
    names = [BIG, "small.txt", BIG]
    argv = ["curl", "-sS", "--noproxy", "*", "--max-time", "50"]
    for i, name in enumerate(names):
        argv += ["-o", str(tmp_path / ("multi%d" % i)), url_of(base, name)]
    r = shunt.run(argv, timeout=60)
    assert r.returncode == 0, r.stderr
    for i, name in enumerate(names):
        assert (tmp_path / ("multi%d" % i)).read_bytes() == content[name], name


@needs_curl
def test_curl_under_shunt_has_libshunt(shunt):
    """curl run via shunt really has the library loaded: it fetches its own
    /proc/self/maps (file:// URL) and libshunt.so is in it; plain curl's
    maps do not have it."""
    argv = ["curl", "-sS", "--max-time", "20", "file:///proc/self/maps"]
    r = shunt.run(argv, timeout=30)
    assert r.returncode == 0 and b"libshunt.so" in r.stdout, r.stderr
    r = run_cmd(argv, timeout=30)
    assert r.returncode == 0 and b"libshunt.so" not in r.stdout, r.stderr


@pytest.mark.parametrize("parallel", [1, 4])
def test_python_client_under_shunt(shunt, http_server, content, parallel):
    srv, base = http_server
    names = sorted(content) + [BIG, "no-such-file"]
    r = shunt.run([PYTHON, PROGRAMS / "http_fetch.py", base] + names
                  + ["--parallel", str(parallel)], timeout=120)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:], srv.describe())
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "LIBSHUNT_MAPPED yes", lines[0]
    expected = []
    for name in names:
        if name in content:
            expected.append("%s 200 %d %s" % (name, len(content[name]), sha(content[name])))
        else:
            expected.append("%s 404 " % name)
    got = lines[1:1 + len(names)]
    for want, have in zip(expected, got):
        if want.endswith(" 404 "):
            assert have.startswith(want), have
        else:
            assert have == want
    assert lines[1 + len(names)] == "HEAD %s 200 %d" % (names[0], len(content[names[0]]))


def test_parallel_plain_clients(http_server, content):
    """Eight plain (not intercepted) clients at once against the shunt'd
    threading server."""
    srv, base = http_server
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(name):
        with opener.open(url_of(base, name), timeout=30) as r:
            return name, r.read()

    names = [BIG, "small.txt", BIG, "data.json", BIG, "sub/nested.bin", BIG, "empty.txt"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        for name, body in ex.map(get, names, timeout=90):
            assert body == content[name], name
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(base + "/missing", timeout=30)
    assert e.value.code == 404


@needs_curl
@needs_ipv6
def test_ipv6_loopback(shunt, start_server, site, content, tmp_path):
    srv, base = start_http(shunt, start_server, site, host="::1")
    for prefix in ([], shunt.cmd([])):
        for name in ("small.txt", BIG):
            out = tmp_path / "v6.bin"
            r, code = curl_fetch(prefix, url_of(base, name), out)
            assert r.returncode == 0 and code == "200", (name, r.stderr, srv.describe())
            assert out.read_bytes() == content[name]
