"""The corpus (corpus.py): Debian's daemons and clients, each with its own
configuration in a temporary directory, listening on 127.0.0.1 only, both
ends under shunt."""
import os
import pwd
import re
import subprocess
import time

import pytest

from shunttest import not_here
from corpus import missing, postgres, registry, run_program, sha256, sha256_file

PROGRAMS, program = registry()

MB = 1 << 20


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.05)


def tls_cert(cx, name="tls"):
    """A self-signed certificate for 127.0.0.1 and localhost: (cert, key, both in one file)."""
    key, crt, pem = cx.tmp / (name + ".key"), cx.tmp / (name + ".crt"), cx.tmp / (name + ".pem")
    cx.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", key, "-out", crt], shunted=False, timeout=30)
    pem.write_bytes(key.read_bytes() + crt.read_bytes())
    for p in (key, crt, pem):
        cx.own(p)
    return crt, key, pem


# ------------------------------------------------------------ plain relays

@program("netcat-openbsd", source="Debian netcat-openbsd", model="poll, one connection each way",
         how="nc -l and nc -N move 12 MiB each way (client to server, then server to client), sha256",
         tools=[("nc", "netcat-openbsd")])
def nc(cx):
    data, digest = cx.payload("data", 12 * MB)   # more than the socket buffers hold before accept
    for server_sends in (False, True):
        port = cx.port()
        out = cx.tmp / ("out-%d" % server_sends)
        if server_sends:
            srv = cx.serve(["sh", "-c", 'exec nc -N -l 127.0.0.1 %d < "%s"' % (port, data)], "nc-l", port=port)
            cx.run(["sh", "-c", 'exec nc 127.0.0.1 %d > "%s" < /dev/null' % (port, out)], timeout=60)
        else:
            srv = cx.serve(["sh", "-c", 'exec nc -l 127.0.0.1 %d > "%s"' % (port, out)], "nc-l", port=port)
            cx.run(["sh", "-c", 'exec nc -N 127.0.0.1 %d < "%s"' % (port, data)], timeout=60)
        srv.proc.wait(timeout=30)
        assert sha256_file(out) == digest
    cx.accelerated(2)


@program("ncat", source="Debian ncat (nmap)", model="nsock event loop; --keep-open --sh-exec forks and execs a "
         "shell per connection, the socket its stdin",
         how="ncat --send-only to ncat -l --recv-only and back (12 MiB each way); ncat -l --keep-open --sh-exec "
             "'cat > FILE' for three clients of 12 MiB; sha256",
         tools=["ncat"])
def ncat(cx):
    data, digest = cx.payload("data", 12 * MB)
    for server_sends in (False, True):
        port = cx.port()
        out = cx.tmp / ("out-%d" % server_sends)
        if server_sends:
            srv = cx.serve(["sh", "-c", 'exec ncat -l 127.0.0.1 %d --send-only < "%s"' % (port, data)], "ncat-l",
                           port=port)
            cx.run(["sh", "-c", 'exec ncat --recv-only 127.0.0.1 %d > "%s"' % (port, out)], timeout=60)
        else:
            srv = cx.serve(["sh", "-c", 'exec ncat -l 127.0.0.1 %d --recv-only > "%s"' % (port, out)], "ncat-l",
                           port=port)
            cx.run(["sh", "-c", 'exec ncat --send-only 127.0.0.1 %d < "%s"' % (port, data)], timeout=60)
        srv.proc.wait(timeout=30)
        assert sha256_file(out) == digest
    port = cx.port()
    (cx.tmp / "got").mkdir()
    cx.serve(["ncat", "-l", "127.0.0.1", port, "--keep-open", "--sh-exec", 'exec cat > got/$NCAT_REMOTE_PORT'],
             "ncat-exec", port=port)
    for i in range(3):
        # more than the kernel's socket buffers hold before accept: a client that sends everything and
        # shuts down before the server claimed the connection stays on kernel TCP (by design)
        size = 12 * MB + i
        data, digest = cx.payload("data%d" % i, size)
        cx.run(["sh", "-c", 'exec ncat --send-only 127.0.0.1 %d < "%s"' % (port, data)], timeout=60)
        # the shell's cat writes the file after the client has gone: wait for the last byte
        wait_until(lambda: sorted(sha256_file(p) for p in (cx.tmp / "got").iterdir()
                                  if p.stat().st_size == size).count(digest) == 1, 20, "cat's file %d" % i)
    cx.accelerated(5)


@program("socat", source="Debian socat", model="select loop; fork per connection",
         how="socat TCP-LISTEN,fork relays to an echo server; 4 connections of 1 MiB echoed, sha256 (both hops)",
         tools=["socat"])
def socat_relay(cx):
    echo, port = cx.port(), cx.port()
    cx.echo_server(echo)
    cx.serve(["socat", "TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork" % port, "TCP:127.0.0.1:%d" % echo],
             "socat", port=port)
    cx.echo_client(port, conns=4, size=MB)
    cx.accelerated(8)


# ------------------------------------------------------------------ proxies

HAPROXY_CONF = """
global
    maxconn 200
    nbthread 2
defaults
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tcp_in
    mode tcp
    bind 127.0.0.1:{tcp}
    option splice-auto
    default_backend echo
backend echo
    mode tcp
    server e1 127.0.0.1:{echo}
frontend http_in
    mode http
    bind 127.0.0.1:{http}
    default_backend web
backend web
    mode http
    server w1 127.0.0.1:{web}
"""


@program("haproxy", source="Debian haproxy", model="its own epoll loop, 2 threads; splice between sockets",
         how="TCP mode with option splice-auto in front of an echo server (4 x 1 MiB), HTTP mode in front of "
             "python http.server (curl, 4 MiB), sha256",
         tools=["haproxy", "curl"])
def haproxy(cx):
    echo, tcp, http, web = cx.port(), cx.port(), cx.port(), cx.port()
    cx.echo_server(echo)
    (cx.tmp / "www").mkdir()
    data, digest = cx.payload("www/file.bin", 4 * MB)
    cx.serve([cx.python, "-m", "http.server", web, "--bind", "127.0.0.1"], "web", cwd=cx.tmp / "www", port=web)
    conf = cx.write("haproxy.cfg", HAPROXY_CONF.format(tcp=tcp, echo=echo, http=http, web=web))
    srv = cx.serve(["haproxy", "-db", "-f", conf], "haproxy", port=tcp)
    cx.wait_port(http, srv)
    cx.echo_client(tcp, conns=4, size=MB)
    r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/file.bin" % http])
    assert sha256(r.stdout) == digest
    cx.accelerated(10)


TINYPROXY_CONF = """
Port {port}
Listen 127.0.0.1
Timeout 60
Allow 127.0.0.1
MaxClients 20
LogLevel Info
{user}
"""


@program("tinyproxy", source="Debian tinyproxy", model="one thread per client",
         how="curl -x through tinyproxy to python http.server, 3 files of 2 MiB, sha256",
         tools=["tinyproxy", "curl"])
def tinyproxy(cx):
    port, web = cx.port(), cx.port()
    (cx.tmp / "www").mkdir()
    files = [cx.payload("www/f%d" % i, 2 * MB + i) for i in range(3)]
    cx.serve([cx.python, "-m", "http.server", web, "--bind", "127.0.0.1"], "web", cwd=cx.tmp / "www", port=web)
    user = "User root\nGroup root" if os.geteuid() == 0 else ""
    conf = cx.write("tinyproxy.conf", TINYPROXY_CONF.format(port=port, user=user))
    cx.serve(["tinyproxy", "-d", "-c", conf], "tinyproxy", port=port)
    for path, digest in files:
        r = cx.run(["curl", "-sS", "--fail", "-x", "http://127.0.0.1:%d" % port,
                    "http://127.0.0.1:%d/%s" % (web, path.name)])
        assert sha256(r.stdout) == digest
    cx.accelerated(6)


# ----------------------------------------------------------- TLS terminators

STUNNEL_SERVER = """
foreground = yes
pid =
debug = notice
[tls-in]
accept = 127.0.0.1:{tls}
connect = 127.0.0.1:{echo}
cert = {crt}
key = {key}
"""

STUNNEL_CLIENT = """
foreground = yes
pid =
debug = notice
[tls-out]
client = yes
accept = 127.0.0.1:{plain}
connect = 127.0.0.1:{tls}
CAfile = {crt}
verifyPeer = yes
"""


@program("stunnel4", source="Debian stunnel4", model="one thread per connection (poll)",
         how="an stunnel client and an stunnel server (TLS between them) in front of an echo server; "
             "4 connections of 1 MiB echoed, sha256 (three hops)",
         tools=["stunnel4", "openssl"])
def stunnel(cx):
    crt, key, _ = tls_cert(cx)
    echo, tls, plain = cx.port(), cx.port(), cx.port()
    cx.echo_server(echo)
    cx.serve(["stunnel4", cx.write("server.conf", STUNNEL_SERVER.format(tls=tls, echo=echo, crt=crt, key=key))],
             "stunnel-server", port=tls)
    cx.serve(["stunnel4", cx.write("client.conf", STUNNEL_CLIENT.format(plain=plain, tls=tls, crt=crt))],
             "stunnel-client", port=plain)
    cx.echo_client(plain, conns=4, size=MB)
    cx.accelerated(12)


@program("openssl s_server / s_client", source="Debian openssl", model="select loop, one connection at a time",
         how="s_server -WWW serves a 4 MiB file to s_client (GET over TLS 1.3), twice; sha256 of the body",
         tools=["openssl"])
def openssl(cx):
    crt, key, _ = tls_cert(cx)
    data, digest = cx.payload("file.bin", 4 * MB)
    port = cx.port()
    cx.serve(["openssl", "s_server", "-accept", "127.0.0.1:%d" % port, "-cert", crt, "-key", key, "-WWW", "-quiet"],
             "s_server", port=port)
    for _ in range(2):
        r = cx.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile", crt, "-verify_return_error",
                    "-quiet", "-ign_eof"], input=b"GET /file.bin HTTP/1.0\r\n\r\n", timeout=60)
        head, _, body = r.stdout.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200"), head[:200]
        assert sha256(body) == digest
    cx.accelerated(2)


NGINX_TLS = """
{user}
daemon off;
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {crt};
        ssl_certificate_key {key};
        root {dir}/www;
        location /app/ {{ proxy_pass http://127.0.0.1:{backend}/; }}
    }}
}}
"""


@program("nginx (TLS, HTTP/2, proxy_pass)", source="Debian nginx-light",
         model="master and 2 worker processes, epoll; TLS terminator in front of a backend",
         how="curl over HTTPS with HTTP/2 and HTTP/1.1 (a 4 MiB static file, a 3 MiB file proxied to python "
             "http.server), h2load 200 requests on 4 connections; sha256",
         tools=[("nginx", "nginx-light"), "curl", ("h2load", "nghttp2-client"), "openssl"])
def nginx_tls(cx):
    crt, key, _ = tls_cert(cx)
    port, backend = cx.port(), cx.port()
    (cx.tmp / "www").mkdir()
    (cx.tmp / "app").mkdir()
    static, sdigest = cx.payload("www/static.bin", 4 * MB)
    proxied, pdigest = cx.payload("app/file.bin", 3 * MB)
    cx.write("www/small.html", "<p>shunt</p>\n" * 30)
    cx.serve([cx.python, "-m", "http.server", backend, "--bind", "127.0.0.1"], "backend", cwd=cx.tmp / "app",
             port=backend)
    user = "user root;" if os.geteuid() == 0 else ""
    conf = cx.write("nginx.conf", NGINX_TLS.format(user=user, dir=cx.tmp, port=port, crt=crt, key=key,
                                                   backend=backend))
    cx.serve(["nginx", "-c", conf, "-p", cx.tmp], "nginx", port=port)
    for proto in ("--http2", "--http1.1"):
        for path, digest in (("/static.bin", sdigest), ("/app/file.bin", pdigest)):
            r = cx.run(["curl", "-sS", "--fail", proto, "--cacert", crt, "https://127.0.0.1:%d%s" % (port, path)])
            assert sha256(r.stdout) == digest, (proto, path)
    r = cx.run(["h2load", "-n", "200", "-c", "4", "-m", "4", "https://127.0.0.1:%d/small.html" % port], timeout=60)
    out = r.stdout.decode()
    assert re.search(r"requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed", out), out
    cx.accelerated(10)


@program("hitch", source="Debian hitch", model="libev, a manager and worker processes",
         how="as nobody (hitch refuses root workers): hitch terminates TLS in front of python http.server: curl fetches 3 files of 2 MiB over HTTPS, sha256",
         tools=["hitch", "curl", "openssl"])
def hitch(cx):
    cx.as_user()     # hitch refuses to run its workers as root
    crt, key, pem = tls_cert(cx)
    port, backend = cx.port(), cx.port()
    (cx.tmp / "www").mkdir()
    files = [cx.payload("www/f%d" % i, 2 * MB + i) for i in range(3)]
    cx.serve([cx.python, "-m", "http.server", backend, "--bind", "127.0.0.1"], "backend", cwd=cx.tmp / "www",
             port=backend)
    cx.serve(["hitch", "--frontend=[127.0.0.1]:%d" % port, "--backend=[127.0.0.1]:%d" % backend, "--workers=2",
              "--daemon=off", pem], "hitch", port=port)
    for path, digest in files:
        r = cx.run(["curl", "-sS", "--fail", "--cacert", crt, "https://127.0.0.1:%d/%s" % (port, path.name)])
        assert sha256(r.stdout) == digest
    cx.accelerated(6)


# ----------------------------------------------------------- HTTP servers

APACHE_CONF = """
ServerRoot {dir}
ServerName localhost
Listen 127.0.0.1:{port}
PidFile {dir}/httpd.pid
DefaultRuntimeDir {dir}
Mutex file:{dir} default
LoadModule mpm_{mpm}_module /usr/lib/apache2/modules/mod_mpm_{mpm}.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so
LoadModule dir_module /usr/lib/apache2/modules/mod_dir.so
TypesConfig /etc/mime.types
ErrorLog {dir}/error.log
LogLevel warn
DocumentRoot {dir}/www
<Directory {dir}/www>
    Require all granted
</Directory>
KeepAlive On
StartServers 2
{user}
"""


def apache(cx, mpm, user):
    port = cx.port()
    (cx.tmp / "www").mkdir()
    data, digest = cx.payload("www/file.bin", 4 * MB)
    cx.write("www/small.html", "<p>shunt</p>\n" * 30)
    cx.own(cx.tmp / "www")
    conf = cx.write("apache2.conf", APACHE_CONF.format(dir=cx.tmp, port=port, mpm=mpm, user=user))
    cx.serve(["apache2", "-DFOREGROUND", "-f", conf], "apache2", port=port)
    for _ in range(2):
        r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/file.bin" % port])
        assert sha256(r.stdout) == digest
    cx.run(["wget", "-q", "-O", cx.tmp / "wget.out", "http://127.0.0.1:%d/file.bin" % port])
    assert sha256_file(cx.tmp / "wget.out") == digest
    r = cx.run(["ab", "-n", "1000", "-c", "8", "-k", "http://127.0.0.1:%d/small.html" % port], timeout=60)
    out = r.stdout.decode()
    assert re.search(r"Complete requests:\s+1000\b", out) and re.search(r"Failed requests:\s+0\b", out), out
    return port


@program("apache2 (event MPM)", source="Debian apache2, apache2-utils",
         model="a parent and worker processes of threads (event MPM), the whole server one unprivileged user",
         how="apache2 -DFOREGROUND as nobody: curl and wget fetch 4 MiB (sha256), ab 1000 keep-alive requests "
             "on 8 connections; clients as nobody too",
         tools=["apache2", "ab", "curl", "wget"])
def apache_event(cx):
    cx.as_user()
    apache(cx, "event", "")
    cx.accelerated(11)


@program("apache2 (prefork MPM, root, User www-data)", source="Debian apache2, apache2-utils",
         model="started as root, one process per connection, the children switch to www-data",
         how="as Debian runs it: root parent, children as www-data; curl, wget (4 MiB, sha256) and ab as root",
         expect="fallback: peer runs as another user",
         tools=["apache2", "ab", "curl", "wget"])
def apache_prefork_root(cx):
    if os.geteuid() != 0:
        not_here("needs root, to start apache2 as Debian does (a root parent, children as www-data)")
    cx.public_dir()     # www-data reads the files
    apache(cx, "prefork", "User www-data\nGroup www-data")
    cx.fell_back("peer runs as another user", count=4)


LIGHTTPD_CONF = """
server.document-root = "{dir}/www"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{dir}/error.log"
server.max-keep-alive-requests = 100
mimetype.assign = (".bin" => "application/octet-stream", ".html" => "text/html")
"""


@program("lighttpd", source="Debian lighttpd", model="one process, its own event loop (epoll), sendfile",
         how="lighttpd -D: wget and curl fetch a 4 MiB file (sha256), ab 1000 keep-alive requests on 8 connections",
         tools=["lighttpd", "wget", "curl", "ab"])
def lighttpd(cx):
    port = cx.port()
    (cx.tmp / "www").mkdir()
    data, digest = cx.payload("www/file.bin", 4 * MB)
    cx.write("www/small.html", "<p>shunt</p>\n" * 30)
    conf = cx.write("lighttpd.conf", LIGHTTPD_CONF.format(dir=cx.tmp, port=port))
    cx.serve(["lighttpd", "-D", "-f", conf], "lighttpd", port=port)
    cx.run(["wget", "-q", "-O", cx.tmp / "wget.out", "http://127.0.0.1:%d/file.bin" % port])
    assert sha256_file(cx.tmp / "wget.out") == digest
    r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/file.bin" % port])
    assert sha256(r.stdout) == digest
    r = cx.run(["ab", "-n", "1000", "-c", "8", "-k", "http://127.0.0.1:%d/small.html" % port], timeout=60)
    out = r.stdout.decode()
    assert re.search(r"Complete requests:\s+1000\b", out) and re.search(r"Failed requests:\s+0\b", out), out
    cx.accelerated(10)


@program("nghttpd / nghttp / h2load", source="Debian nghttp2-server, nghttp2-client",
         model="libev, one thread (server and clients)",
         how="nghttpd --no-tls serves a 4 MiB file to nghttp over HTTP/2 cleartext (sha256); h2load 400 requests, "
             "4 connections, 8 streams each",
         tools=[("nghttpd", "nghttp2-server"), ("nghttp", "nghttp2-client"), ("h2load", "nghttp2-client")])
def nghttp2(cx):
    port = cx.port()
    (cx.tmp / "www").mkdir()
    data, digest = cx.payload("www/file.bin", 4 * MB)
    cx.write("www/small.html", "<p>shunt</p>\n" * 30)
    cx.serve(["nghttpd", "--no-tls", "-d", cx.tmp / "www", "-a", "127.0.0.1", port], "nghttpd", port=port)
    for _ in range(2):
        r = cx.run(["nghttp", "http://127.0.0.1:%d/file.bin" % port])
        assert sha256(r.stdout) == digest
    r = cx.run(["h2load", "-n", "400", "-c", "4", "-m", "8", "http://127.0.0.1:%d/small.html" % port], timeout=60)
    out = r.stdout.decode()
    assert re.search(r"requests: 400 total, 400 started, 400 done, 400 succeeded, 0 failed", out), out
    cx.accelerated(6)


# ----------------------------------------------------------- databases

# Every psql run is offered a channel: each is one connection, most of them short, and
# after four short ones in a row to one listener the verdict shared by a program's runs
# (docs/architecture.md, "Verdicts shared across a program's runs") puts the next runs on
# kernel TCP by design. With four at once, whether the last started after the other three
# had ended decided whether 8 were accelerated (CI failed so once, 7 of 8, reason short).
PSQL_ENV = {"SHUNT_SHORT_CONNS": "0"}


def psql(cx, port, sql, db="postgres", input=None, timeout=60):
    r = cx.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", db,
                "-At", "-c", sql], input=input, timeout=timeout, env=cx.env(**PSQL_ENV))
    return r.stdout.decode()


def text_payload(cx, name, lines):
    """A text file of LINES lines of random hex (COPY's text format needs no escaping)."""
    p = cx.tmp / name
    with open(p, "w") as f:
        for _ in range(lines):
            f.write(os.urandom(48).hex() + "\n")
    cx.own(p)
    return p, sha256_file(p)


@program("PostgreSQL (psql)", source="Debian postgresql", model="a postmaster forking one backend per connection",
         how="as nobody: psql \\copy of 4 MiB of text into a table and COPY back out through psql (sha256), "
             "sha256 computed by the server over the same rows, 4 psql at once",
         tools=[("psql", "postgresql-client")])
def postgresql(cx):
    port = postgres(cx)
    data, digest = text_payload(cx, "rows.txt", 40000)
    psql(cx, port, "create table t (id serial primary key, line text)")
    psql(cx, port, "\\copy t (line) from '%s'" % data)
    out = psql(cx, port, "copy (select line from t order by id) to stdout")
    assert sha256(out.encode()) == digest
    server_side = psql(cx, port, "select encode(sha256(string_agg(line || E'\\n', '' order by id)::bytea), 'hex') "
                                 "from t").strip()
    assert server_side == digest
    procs = [subprocess.Popen(cx._argv(["psql", "-X", "-At", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                        "-c", "select count(*), sum(length(line)) from t where id %% 4 = %d" % i],
                                       True), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=cx.env(**PSQL_ENV), cwd=str(cx.tmp)) for i in range(4)]
    total = 0
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        count, length = out.decode().strip().split("|")
        total += int(count)
        assert int(length) == 96 * int(count)
    assert total == 40000
    cx.accelerated(8)


@program("pgbench", source="Debian postgresql", model="client threads with many connections; a backend process each",
         how="as nobody: pgbench -i, then the TPC-B-like default script, 4 clients on 2 threads, 50 transactions "
             "each; every transaction processed, the history table counts them",
         tools=[("pgbench", "postgresql")])
def pgbench(cx):
    port = postgres(cx)
    base = ["pgbench", "-h", "127.0.0.1", "-p", port, "-U", "postgres"]
    cx.run(base + ["-i", "-q", "-s", "1", "postgres"], timeout=120)
    r = cx.run(base + ["-c", "4", "-j", "2", "-t", "50", "postgres"], timeout=120)
    out = r.stdout.decode()
    assert re.search(r"number of transactions actually processed: 200/200", out), out
    assert "number of failed transactions: 0" in out, out
    assert psql(cx, port, "select count(*) from pgbench_history").strip() == "200"
    cx.accelerated(6)


PSYCOPG2_CLIENT = r"""
import hashlib, os, sys, threading
import psycopg2
port = int(sys.argv[1])
dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres" % port
c = psycopg2.connect(dsn)
c.autocommit = True
cur = c.cursor()
cur.execute("create table blobs (id int primary key, data bytea)")
blobs = [os.urandom((1 << 20) + i) for i in range(4)]
for i, b in enumerate(blobs):
    cur.execute("insert into blobs values (%s, %s)", (i, psycopg2.Binary(b)))
cur.execute("select id, data, encode(sha256(data), 'hex') from blobs order by id")
rows = cur.fetchall()
ok = [bytes(r[1]) for r in rows] == blobs and [r[2] for r in rows] == [hashlib.sha256(b).hexdigest() for b in blobs]
results = []
def worker(k):
    with psycopg2.connect(dsn) as w, w.cursor() as wc:
        wc.execute("select sum(length(data)) from blobs where id %% 2 = %s", (k % 2,))
        results.append(wc.fetchone()[0])
ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
ok = ok and sorted(results) == sorted([sum(len(b) for i, b in enumerate(blobs) if i % 2 == k % 2) for k in range(4)])
print("OK" if ok else "MISMATCH", flush=True)
"""


@program("psycopg2 (libpq)", source="Debian python3-psycopg2, postgresql",
         model="libpq's blocking connections from Python threads; a backend process each",
         how="as nobody, Debian's python3: 4 bytea values of 1 MiB inserted and read back with their sha256 computed "
             "by the server, 4 threads with a connection each; all compared",
         tools=[("psql", "postgresql-client")])
def psycopg2(cx):
    py = "/usr/bin/python3"
    if subprocess.run([py, "-c", "import psycopg2"], capture_output=True).returncode != 0:
        missing("psycopg2 is not installed for %s (Debian package python3-psycopg2; scripts/install-deps "
                "installs it)" % py)
    port = postgres(cx)
    r = cx.run([py, cx.write("psycopg2_client.py", PSYCOPG2_CLIENT), port], timeout=60)
    assert r.stdout.decode().strip() == "OK", (r.stdout, r.stderr[-2000:])
    cx.accelerated(5)


PGBOUNCER_INI = """
[databases]
postgres = host=127.0.0.1 port={pg} dbname=postgres user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 50
admin_users = postgres
pidfile =
logfile =
"""


@program("pgbouncer", source="Debian pgbouncer", model="libevent, one process; pools server connections",
         how="as nobody: psql and pgbench (4 clients, 50 select-only transactions each) through pgbouncer in "
             "transaction pooling to PostgreSQL; 4 MiB copied in and out through it (sha256)",
         tools=["pgbouncer", ("pgbench", "postgresql")])
def pgbouncer(cx):
    pg = postgres(cx)
    port = cx.port()
    cx.write("users.txt", '"postgres" ""\n')
    ini = cx.write("pgbouncer.ini", PGBOUNCER_INI.format(pg=pg, port=port, dir=cx.tmp))
    cx.serve(["pgbouncer", ini], "pgbouncer", port=port)
    data, digest = text_payload(cx, "rows.txt", 40000)
    psql(cx, port, "create table t (id serial primary key, line text)")
    psql(cx, port, "\\copy t (line) from '%s'" % data)
    assert sha256(psql(cx, port, "copy (select line from t order by id) to stdout").encode()) == digest
    base = ["pgbench", "-h", "127.0.0.1", "-p", port, "-U", "postgres"]
    cx.run(base + ["-i", "-q", "-s", "1", "postgres"], timeout=120)
    r = cx.run(base + ["-S", "-c", "4", "-j", "2", "-t", "50", "postgres"], timeout=120)
    assert re.search(r"number of transactions actually processed: 200/200", r.stdout.decode()), r.stdout
    cx.accelerated(10)


# ----------------------------------------------------------- message brokers

MOSQUITTO_CONF = """
listener {port} 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
log_type all
{user}
"""


@program("mosquitto", source="Debian mosquitto, mosquitto-clients", model="one thread, its own poll/epoll loop",
         how="mosquitto_sub subscribed to two topics; mosquitto_pub -l publishes 300 lines at QoS 1 and -f a 2 MiB "
             "binary message; both subscribers get everything (sha256); a retained message read by a late subscriber",
         tools=["mosquitto", "mosquitto_pub", "mosquitto_sub"])
def mosquitto(cx):
    port = cx.port()
    user = "user root" if os.geteuid() == 0 else ""
    broker = cx.serve(["mosquitto", "-c", cx.write("mosquitto.conf", MOSQUITTO_CONF.format(port=port, user=user))],
                      "mosquitto", port=port)
    big, digest = cx.payload("big.bin", 2 * MB)
    lines = "".join("line %d %s\n" % (i, os.urandom(20).hex()) for i in range(300))
    sub = ["mosquitto_sub", "-h", "127.0.0.1", "-p", port]
    s1 = cx.serve(["sh", "-c", 'exec "$@" > lines.out', "sh"] + sub + ["-t", "corpus/lines", "-q", "1", "-C", "300"],
                  "sub-lines")
    s2 = cx.serve(["sh", "-c", 'exec "$@" > big.out', "sh"] + sub + ["-t", "corpus/big", "-q", "1", "-C", "1", "-N"],
                  "sub-big")
    wait_until(lambda: len(re.findall(r"Received SUBSCRIBE", broker.stderr())) >= 2, 20, "two subscriptions")
    pub = ["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-q", "1"]
    cx.run(pub + ["-t", "corpus/lines", "-l"], input=lines.encode())
    cx.run(pub + ["-t", "corpus/big", "-f", big])
    for s in (s1, s2):
        s.proc.wait(timeout=30)
        assert s.proc.returncode == 0, s.describe()
    assert (cx.tmp / "lines.out").read_text() == lines
    assert sha256_file(cx.tmp / "big.out") == digest
    cx.run(pub + ["-t", "corpus/retained", "-r", "-f", big])
    r = cx.run(sub + ["-t", "corpus/retained", "-C", "1", "-N"])
    assert sha256(r.stdout) == digest
    cx.accelerated(6)


@program("redis pub/sub (redis-cli)", source="Debian redis-server, redis-tools", model="one thread, its own epoll loop",
         how="redis-cli SUBSCRIBE; 200 PUBLISHes from one redis-cli reading commands on stdin, and a 1 MiB message "
             "with -x; the subscriber prints all of them (sha256 of each)",
         tools=["redis-server", "redis-cli"])
def redis_pubsub(cx):
    port = cx.port()
    cx.serve(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis",
             port=port)
    sub = cx.serve(["redis-cli", "-p", port, "--raw", "subscribe", "corpus"], "subscriber")
    sub.wait_for(r"^subscribe\ncorpus\n1$")
    msgs = ["m%d-%s" % (i, os.urandom(100).hex()) for i in range(200)]
    cx.run(["redis-cli", "-p", port], input="".join("PUBLISH corpus %s\n" % m for m in msgs).encode())
    big = os.urandom(MB // 2).hex()
    r = cx.run(["redis-cli", "-p", port, "-x", "publish", "corpus"], input=big.encode())
    assert r.stdout.strip() == b"1"
    want = msgs + [big]
    # every message whole: redis-cli writes the 1 MiB one to its file in
    # stdio's chunks after its header, and only its end has a newline (CI
    # once read the header and part of the body: another hash)
    def complete():
        out = sub.stdout()
        return out.count("message\ncorpus\n") >= len(want) and out.endswith("\n")
    wait_until(complete, 30, "the subscriber's messages")
    got = re.findall(r"^message\ncorpus\n(.*)$", sub.stdout(), re.M)
    assert [sha256(g.encode()) for g in got] == [sha256(m.encode()) for m in want], \
        "lengths of the last ones: got %s, sent %s" % ([len(g) for g in got][-2:], [len(m) for m in want][-2:])
    cx.accelerated(3)


# ------------------------------------------------------------ file transfer

VSFTPD_CONF = """
listen=YES
listen_ipv6=NO
listen_address=127.0.0.1
listen_port={port}
background=NO
anonymous_enable=YES
no_anon_password=YES
anon_root={dir}/ftp
local_enable=NO
write_enable=NO
pasv_enable=YES
pasv_min_port={pasv}
pasv_max_port={pasv_max}
pasv_address=127.0.0.1
secure_chroot_dir={dir}/empty
xferlog_enable=NO
vsftpd_log_file={dir}/vsftpd.log
seccomp_sandbox=NO
isolate={isolate}
isolate_network={isolate}
"""


VSFTPD_MODEL = ("a root listener forking per connection; each session a privileged parent and an unprivileged "
                "child (chroot, another uid); a data connection per transfer")
# vsftpd's seccomp_sandbox=YES (its default) kills the session with SIGSYS on this Debian even without shunt
# (newfstatat, which glibc 2.36's fstat uses, is not in its filter): it is off here, as Debian's users turn it off.
VSFTPD_HOW = ("anonymous FTP, root, seccomp_sandbox=NO (vsftpd's filter kills it without shunt on Debian 12), "
              "isolate={}: curl lists the directory and downloads 3 files of 2 MiB in passive mode (sha256)")


def vsftpd_isolated(cx):
    vsftpd(cx, True)


program("vsftpd (isolate=YES)", source="Debian vsftpd", model=VSFTPD_MODEL + "; sessions made by the raw clone "
        "system call in new IPC/PID/network namespaces (vsftpd's defaults)", how=VSFTPD_HOW.format("YES (default)") +
        "; the control connections accelerated, then moved back to kernel TCP before each session's raw clone "
        "(shunt does not follow such a process); the data connections kernel TCP",
        expect="fallback: moved back: a process made by the raw clone system call, which shunt does not follow, "
               "got it", tools=["vsftpd", "curl"])(vsftpd_isolated)


@program("vsftpd (isolate=NO)", source="Debian vsftpd", model=VSFTPD_MODEL + "; sessions made by fork()",
         how=VSFTPD_HOW.format("NO and isolate_network=NO (Debian's README.Debian for containers)") +
         "; control connections accelerated, data connections on kernel TCP (the session runs as the ftp user)",
         tools=["vsftpd", "curl"])
def vsftpd_forked(cx):
    vsftpd(cx, False)


def vsftpd(cx, isolate):
    if os.geteuid() != 0:
        not_here("needs root: vsftpd's standalone mode, with its privileged parent, runs as root")
    cx.public_dir()
    (cx.tmp / "ftp").mkdir()
    (cx.tmp / "empty").mkdir()
    files = [cx.payload("ftp/f%d.bin" % i, 2 * MB + i) for i in range(3)]
    for p in [cx.tmp / "ftp", cx.tmp / "empty"] + [f for f, _ in files]:
        os.chown(p, 0, 0)
    port, pasv = cx.port(), cx.port()
    conf = cx.write("vsftpd.conf", VSFTPD_CONF.format(port=port, dir=cx.tmp, pasv=pasv, pasv_max=pasv,
                                                      isolate="YES" if isolate else "NO"))
    os.chmod(conf, 0o600)
    cx.serve(["vsftpd", conf], "vsftpd", port=port)
    r = cx.run(["curl", "-sS", "--list-only", "ftp://127.0.0.1:%d/" % port])
    assert sorted(r.stdout.decode().split()) == ["f0.bin", "f1.bin", "f2.bin"]
    for path, digest in files:
        r = cx.run(["curl", "-sS", "--fail", "ftp://127.0.0.1:%d/%s" % (port, path.name)])
        assert sha256(r.stdout) == digest
    # The control connections: accepted by the root listener, then carried by the session's processes.
    # The data connections: accepted by the session's privileged parent, which after login runs with the
    # ftp user's uid (keeping a few capabilities), while curl runs as root: another user's registry.
    if isolate:
        # Each session is a raw clone, which passes every call through: the listener's accepted
        # connection moves back to kernel TCP before it (curl's end follows it there), and the
        # session's data listeners are not shunt's.
        cx.accelerated(4, allow=("a raw clone of this process gets it", "the peer left for a program without shunt",
                                 "no accelerated listener"))
        cx.fell_back("a raw clone of this process gets it", count=4, accelerated_ok=True)
        return
    cx.accelerated(4, allow=("peer runs as another user",))
    cx.fell_back("peer runs as another user", count=4, accelerated_ok=True)


RSYNCD_CONF = """
use chroot = no
pid file = {dir}/rsyncd.pid
log file = {dir}/rsyncd.log
[data]
    path = {dir}/module
    read only = no
"""


def file_tree(root, files, size):
    root.mkdir(parents=True, exist_ok=True)
    digests = {}
    for i in range(files):
        p = root / ("d%d" % (i % 3)) / ("f%d.bin" % i)
        p.parent.mkdir(exist_ok=True)
        data = os.urandom(size + i * 1001)
        p.write_bytes(data)
        digests[str(p.relative_to(root))] = sha256(data)
    return digests


def tree_digests(root):
    return {str(p.relative_to(root)): sha256_file(p) for p in root.rglob("*") if p.is_file()}


@program("rsync daemon", source="Debian rsync", model="rsync --daemon forks per connection and switches to uid "
         "nobody (its default); the client forks a receiver and a generator sharing the socket",
         how="rsync --daemon as root, module as Debian's default uid nobody: rsync -a downloads a tree of 24 files "
             "(5 MiB) and uploads another; every file's sha256",
         tools=["rsync"])
def rsync(cx):
    cx.public_dir()
    module = cx.tmp / "module"
    down = file_tree(module / "down", 24, 200_000)
    (module / "up").mkdir()
    cx.own(module)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(module / "up", nobody.pw_uid, nobody.pw_gid)   # where the daemon's child (uid nobody) writes
    port = cx.port()
    conf = cx.write("rsyncd.conf", RSYNCD_CONF.format(dir=cx.tmp))
    cx.serve(["rsync", "--daemon", "--no-detach", "--config", conf, "--address", "127.0.0.1", "--port", port],
             "rsyncd", port=port)
    cx.run(["rsync", "-a", "rsync://127.0.0.1:%d/data/down/" % port, cx.tmp / "local"], timeout=60)
    assert tree_digests(cx.tmp / "local") == down
    up = file_tree(cx.tmp / "upload", 12, 150_000)
    cx.run(["rsync", "-a", "%s/" % (cx.tmp / "upload"), "rsync://127.0.0.1:%d/data/up/" % port], timeout=60)
    assert tree_digests(module / "up") == up
    cx.accelerated(2)


@program("git daemon", source="Debian git", model="git daemon forks per connection and runs upload-pack / "
         "receive-pack on the socket; the client runs index-pack",
         how="git clone git:// of a repository of 3 commits (4 MiB of random files), every file's sha256; a commit "
             "pushed back with receive-pack, then fetched by a second clone",
         tools=["git"])
def git_daemon(cx):
    src = cx.tmp / "work"
    git = ["git", "-c", "user.name=corpus", "-c", "user.email=corpus@localhost", "-c", "init.defaultBranch=main"]
    cx.run(git + ["init", "-q", src], shunted=False)
    digests = {}
    for c in range(3):
        digests.update(file_tree(src, 4, 300_000 + c))
        cx.run(git + ["-C", src, "add", "-A"], shunted=False)
        cx.run(git + ["-C", src, "commit", "-q", "-m", "commit %d" % c], shunted=False)
        digests = tree_digests(src)
        digests.pop(".git", None)
    digests = {k: v for k, v in digests.items() if not k.startswith(".git/")}
    (cx.tmp / "srv").mkdir()
    cx.run(git + ["clone", "-q", "--bare", src, cx.tmp / "srv" / "repo.git"], shunted=False)
    port = cx.port()
    cx.serve(["git", "daemon", "--reuseaddr", "--base-path=%s" % (cx.tmp / "srv"), "--export-all",
              "--enable=receive-pack", "--listen=127.0.0.1", "--port=%d" % port, cx.tmp / "srv"], "git-daemon",
             port=port)
    url = "git://127.0.0.1:%d/repo.git" % port
    cx.run(git + ["clone", "-q", url, cx.tmp / "clone"], timeout=60)
    got = {k: v for k, v in tree_digests(cx.tmp / "clone").items() if not k.startswith(".git/")}
    assert got == digests
    extra = file_tree(cx.tmp / "clone" / "pushed", 2, 500_000)
    cx.run(git + ["-C", cx.tmp / "clone", "add", "-A"], shunted=False)
    cx.run(git + ["-C", cx.tmp / "clone", "commit", "-q", "-m", "pushed"], shunted=False)
    cx.run(git + ["-C", cx.tmp / "clone", "push", "-q", "origin", "main"], timeout=60)
    cx.run(git + ["clone", "-q", url, cx.tmp / "clone2"], timeout=60)
    assert tree_digests(cx.tmp / "clone2" / "pushed") == extra
    cx.accelerated(3)


# ------------------------------------------------------------------- DNS

UNBOUND_CONF = """
server:
    interface: 127.0.0.1@{port}
    port: {port}
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{dir}"
    pidfile: ""
    use-syslog: no
    logfile: ""
    verbosity: 1
    do-ip6: no
    do-udp: yes
    do-tcp: yes
    incoming-num-tcp: 20
    access-control: 127.0.0.0/8 allow
    module-config: "iterator"
    local-zone: "corpus.test." static
{data}
remote-control:
    control-enable: no
"""


@program("unbound", source="Debian unbound, bind9-dnsutils", model="libevent, one thread",
         how="DNS over TCP: dig +tcp asks unbound for a static local zone, a TXT answer of 150 strings (about "
             "30 KiB, too big for UDP) and 50 A records over one connection with +keepopen; every record compared",
         tools=["unbound", ("dig", "bind9-dnsutils")])
def unbound(cx):
    port = cx.port()
    txt = ["%03d-%s" % (i, os.urandom(90).hex()) for i in range(150)]
    data = "\n".join('    local-data: \'big.corpus.test. 300 IN TXT "%s"\'' % t for t in txt)
    data += "\n" + "\n".join('    local-data: "h%d.corpus.test. 300 IN A 192.0.2.%d"' % (i, i + 1) for i in range(50))
    conf = cx.write("unbound.conf", UNBOUND_CONF.format(port=port, dir=cx.tmp, data=data))
    cx.serve(["unbound", "-d", "-c", conf], "unbound", port=port)
    r = cx.run(["dig", "+tcp", "+short", "-p", port, "@127.0.0.1", "big.corpus.test", "TXT"])
    assert sorted(l.strip('"') for l in r.stdout.decode().split()) == sorted(txt)
    r = cx.run(["dig", "+tcp", "+keepopen", "+short", "-p", port, "@127.0.0.1"] +
               ["h%d.corpus.test" % i for i in range(50)])
    assert r.stdout.decode().split() == ["192.0.2.%d" % (i + 1) for i in range(50)]
    cx.accelerated(2)


# ------------------------------------------------------- language runtimes

def script_echo(cx, interpreter, script, conns=6):
    """An echo server and client in one script of a language runtime: the
    server prints its port, the client says OK when every byte came back
    (and on standard error what did not)."""
    srv = cx.serve([interpreter, script, "server"], interpreter + "-server")
    port = srv.wait_for(r"^PORT (\d+)$", timeout=60).group(1)
    r = cx.run([interpreter, script, "client", port], timeout=90)
    assert r.stdout.decode().split() == ["OK"], (r.stdout.decode(), r.stderr.decode()[-2000:])
    cx.accelerated(conns)


RUBY_ECHO = r"""
require 'socket'
if ARGV[0] == "server"
  srv = TCPServer.new("127.0.0.1", 0)
  puts "PORT #{srv.addr[1]}"; STDOUT.flush
  loop do
    Thread.new(srv.accept) do |s|
      while (d = (s.readpartial(65536) rescue nil))
        s.write(d)
      end
      s.close_write rescue nil
      s.close
    end
  end
else
  port, bad = ARGV[1].to_i, []
  (0...6).map { |i|
    Thread.new do
      s = TCPSocket.new("127.0.0.1", port)
      s.write("hello #{i}\n")
      first = s.readpartial(64)
      data = Random.new(i).bytes(2 * 1024 * 1024 + i)
      w = Thread.new { s.write(data); s.close_write }
      got = s.read
      w.join
      s.close
      bad << "#{i}: #{first.inspect}, #{got.bytesize} of #{data.bytesize}" unless first == "hello #{i}\n" && got == data
    end
  }.each(&:join)
  STDERR.puts bad
  puts(bad.empty? ? "OK" : "MISMATCH")
end
"""


@program("Ruby (threads)", source="Debian ruby", model="Ruby's threads (one per connection, the VM's lock between "
         "them), blocking sockets that Ruby waits on with ppoll",
         how="a TCPServer echo with a thread per connection and a client of 6 threads: a first line answered, then "
             "2 MiB each way at once (a writer thread, close_write, read to the end), every byte compared",
         tools=["ruby"])
def ruby(cx):
    script_echo(cx, "ruby", cx.write("echo.rb", RUBY_ECHO))


PHP_SHA = r"""<?php
$body = file_get_contents('php://input');
header('Content-Type: text/plain');
echo hash('sha256', $body), " ", strlen($body), "\n";
"""


@program("PHP built-in server", source="Debian php-cli", model="php -S: one process, a select loop",
         how="php -S serves a 4 MiB file to curl three times (sha256) and a script that answers the sha256 of a "
             "3 MiB POST body",
         tools=[("php", "php-cli"), "curl"])
def php(cx):
    port = cx.port()
    (cx.tmp / "www").mkdir()
    _, digest = cx.payload("www/file.bin", 4 * MB)
    cx.write("www/sha.php", PHP_SHA)
    body, body_digest = cx.payload("body.bin", 3 * MB)
    cx.serve(["php", "-S", "127.0.0.1:%d" % port, "-t", cx.tmp / "www"], "php", port=port)
    for _ in range(3):
        r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/file.bin" % port])
        assert sha256(r.stdout) == digest
    r = cx.run(["curl", "-sS", "--fail", "--data-binary", "@%s" % body, "http://127.0.0.1:%d/sha.php" % port])
    assert r.stdout.decode().split() == [body_digest, str(3 * MB)], r.stdout.decode()
    cx.accelerated(4)


VARNISH_VCL = """vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{backend}"; }}
"""


@program("Varnish", source="Debian varnish", model="a manager process and a child of worker threads with its own "
         "epoll waiter; the VCL compiled with cc at start",
         how="as nobody (varnishd -j none, as in containers): Varnish in front of Python's http.server; curl fetches "
             "a 4 MiB file through it three times (the first from the backend, then from Varnish's cache; sha256), "
             "ab 2000 keep-alive requests on 4 connections",
         tools=[("varnishd", "varnish"), "curl", "ab"])
def varnish(cx):
    cx.as_user("nobody")
    port, backend = cx.port(), cx.port()
    (cx.tmp / "www").mkdir()
    cx.own(cx.tmp / "www")
    _, digest = cx.payload("www/file.bin", 4 * MB)
    cx.write("www/small.html", "<p>shunt</p>\n" * 30)
    cx.serve([cx.python, "-m", "http.server", "--bind", "127.0.0.1", "--directory", cx.tmp / "www", backend],
             "http.server", port=backend)
    vcl = cx.write("default.vcl", VARNISH_VCL.format(backend=backend))
    work = cx.tmp / "varnish"
    work.mkdir()
    cx.own(work)
    cx.serve(["varnishd", "-F", "-j", "none", "-n", work, "-a", "127.0.0.1:%d" % port, "-f", vcl,
              "-s", "malloc,64m"], "varnishd", port=port, timeout=60)
    for _ in range(3):
        r = cx.run(["curl", "-sS", "--fail", "http://127.0.0.1:%d/file.bin" % port])
        assert sha256(r.stdout) == digest
    r = cx.run(["ab", "-n", "2000", "-c", "4", "-k", "http://127.0.0.1:%d/small.html" % port], timeout=60)
    out = r.stdout.decode()
    assert re.search(r"Complete requests:\s+2000\b", out) and re.search(r"Failed requests:\s+0\b", out), out
    cx.accelerated(8)


ERLANG_ECHO = r"""#!/usr/bin/env escript
main(["server"]) ->
    {ok, L} = gen_tcp:listen(0, [binary, {ip, {127,0,0,1}}, {active, false}]),
    {ok, Port} = inet:port(L),
    io:format("PORT ~p~n", [Port]),
    accept(L);
main(["client", P]) ->
    Port = list_to_integer(P),
    Self = self(),
    [spawn(fun() -> Self ! {done, one(Port, I)} end) || I <- lists:seq(1, 6)],
    Bad = [R || R <- [receive {done, R} -> R end || _ <- lists:seq(1, 6)], R =/= ok],
    io:format(standard_error, "~p~n", [Bad]),
    io:format("~s~n", [case Bad of [] -> "OK"; _ -> "MISMATCH" end]).
accept(L) ->
    {ok, S} = gen_tcp:accept(L),
    Pid = spawn(fun() -> receive go -> echo(S) end end),
    ok = gen_tcp:controlling_process(S, Pid),
    Pid ! go,
    accept(L).
echo(S) ->
    case gen_tcp:recv(S, 0) of
        {ok, D} -> ok = gen_tcp:send(S, D), echo(S);
        {error, closed} -> gen_tcp:close(S)
    end.
one(Port, I) ->
    {ok, S} = gen_tcp:connect({127,0,0,1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S, <<"hello">>),
    {ok, <<"hello">>} = gen_tcp:recv(S, 5),
    Data = rand:bytes(1048576 + I),
    spawn(fun() -> ok = gen_tcp:send(S, Data) end),
    Got = recv_n(S, byte_size(Data), []),
    gen_tcp:close(S),
    case Got =:= Data of true -> ok; false -> {I, byte_size(Got)} end.
recv_n(_S, 0, Acc) -> iolist_to_binary(lists:reverse(Acc));
recv_n(S, N, Acc) -> {ok, D} = gen_tcp:recv(S, 0), recv_n(S, N - byte_size(D), [D | Acc]).
"""


@program("Erlang/OTP (gen_tcp)", source="Debian erlang-base", model="the BEAM's schedulers and its own poll thread "
         "(epoll); a process per connection, sockets handed between processes (controlling_process)",
         how="an escript gen_tcp echo server and a client of 6 Erlang processes: a first message answered, then "
             "1 MiB each way at once (a sender process), every byte compared",
         tools=[("escript", "erlang-base")])
def erlang(cx):
    script_echo(cx, "escript", cx.write("echo.escript", ERLANG_ECHO))


@pytest.mark.parametrize("prog", [p.param() for p in PROGRAMS])
def test_program(prog, shunt, tmp_path, start_server, corpus_cache):
    run_program(prog, shunt, tmp_path, start_server, corpus_cache)
