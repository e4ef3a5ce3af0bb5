"""The corpus (corpus.py): event loops that come as libraries, each with a
tiny echo server and client built in the test: asio (C++, Debian
libasio-dev), tokio (Rust, 1.38 from crates.io, its sources in
tests/programs/tokio-echo/), Java NIO (javac), and Go with
cgo (whose own sockets shunt cannot see, by design).  Every echo client sends
6 connections of 2 MiB (after a first round trip of 64 KiB), streams the rest
while reading, shuts down its side, reads to EOF and compares every byte.

The programs are built once into <build>/corpus/<name>-<hash of the source>,
so a second run does not build them again."""
import hashlib
import os
import shutil
import subprocess

import pytest

from corpus import registry, run_program
from shunttest import PROGRAMS as PROGRAMS_DIR, base_env, build_dir, maps_has_libshunt, missing

PROGRAMS, program = registry()


def built(name, sources, build):
    """The directory of NAME built from SOURCES ({file: text}) by BUILD(dir),
    made once per content."""
    h = hashlib.sha256(repr(sorted(sources.items())).encode()).hexdigest()[:16]
    out = build_dir() / "corpus" / ("%s-%s" % (name, h))
    if (out / ".done").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f, text in sources.items():
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        (out / f).write_text(text)
    build(out)
    (out / ".done").write_text("")
    out.chmod(0o755)
    return out


def sh(argv, cwd, env=None, timeout=300, what="build"):
    try:
        r = subprocess.run([str(a) for a in argv], cwd=str(cwd), env=env or base_env(), capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("%s timed out after %ss: %s" % (what, timeout, argv))
    if r.returncode != 0:
        pytest.fail("%s failed (%s): %s\n%s" % (what, r.returncode, argv, r.stderr.decode(errors="replace")[-4000:]))
    return r


def echo(cx, server_argv, client_argv, name, env=None):
    srv = cx.serve(server_argv, name + "-server", env=env)
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    r = cx.run(client_argv + [port], env=env, timeout=90)
    out = r.stdout.decode()
    assert out.strip().splitlines()[-1:] == ["OK"], (out[-2000:], r.stderr.decode()[-2000:])
    return srv, port


# -------------------------------------------------------------------- asio

ASIO_ECHO = r"""
#include <asio.hpp>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>
using asio::ip::tcp;

static std::vector<char> payload(unsigned seed, size_t n) {
    std::vector<char> b(n);
    unsigned x = seed * 2654435761u + 1;
    for (auto &c : b) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; c = (char)x; }
    return b;
}

// The server: asio's async echo, one io_context run by two threads.
struct Session : std::enable_shared_from_this<Session> {
    tcp::socket s;
    std::array<char, 65536> buf;
    explicit Session(tcp::socket s) : s(std::move(s)) {}
    void read() {
        auto self = shared_from_this();
        s.async_read_some(asio::buffer(buf), [this, self](std::error_code ec, size_t n) {
            if (ec) {   // EOF: half-close back
                std::error_code e;
                s.shutdown(tcp::socket::shutdown_send, e);
                return;
            }
            asio::async_write(s, asio::buffer(buf, n), [this, self](std::error_code ec, size_t) { if (!ec) read(); });
        });
    }
};

static void accept_one(tcp::acceptor &a) {
    a.async_accept([&a](std::error_code ec, tcp::socket s) {
        if (!ec) std::make_shared<Session>(std::move(s))->read();
        accept_one(a);
    });
}

// The client: 6 connections on one io_context; each sends a first 64 KiB and
// waits for its echo, then writes the rest while reading to EOF.
enum { FIRST = 65536, SIZE = 2 << 20, CONNS = 6 };
struct Conn : std::enable_shared_from_this<Conn> {
    tcp::socket s;
    std::vector<char> want, got;
    std::array<char, 65536> buf;
    bool *ok;
    Conn(asio::io_context &io, unsigned i, bool *ok) : s(io), want(payload(i, SIZE + i)), ok(ok) {}
    void start(tcp::endpoint ep) {
        auto self = shared_from_this();
        s.async_connect(ep, [this, self](std::error_code ec) {
            if (ec) return;
            asio::async_write(s, asio::buffer(want.data(), FIRST), [this, self](std::error_code ec, size_t) {
                if (ec) return;
                got.resize(FIRST);
                asio::async_read(s, asio::buffer(got), [this, self](std::error_code ec, size_t) {
                    if (ec) return;
                    asio::async_write(s, asio::buffer(want.data() + FIRST, want.size() - FIRST),
                                      [this, self](std::error_code ec, size_t) {
                                          std::error_code e;
                                          if (!ec) s.shutdown(tcp::socket::shutdown_send, e);
                                      });
                    read();
                });
            });
        });
    }
    void read() {
        auto self = shared_from_this();
        s.async_read_some(asio::buffer(buf), [this, self](std::error_code ec, size_t n) {
            if (ec) { *ok = got == want; return; }
            got.insert(got.end(), buf.data(), buf.data() + n);
            read();
        });
    }
};

int main(int argc, char **argv) {
    asio::io_context io;
    if (argc > 1 && std::string(argv[1]) == "server") {
        tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        std::printf("PORT %d\n", a.local_endpoint().port());
        std::fflush(stdout);
        accept_one(a);
        std::thread t([&] { io.run(); });
        io.run();
        t.join();
        return 0;
    }
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), (unsigned short)std::atoi(argv[2]));
    bool ok[CONNS] = {};
    for (unsigned i = 0; i < CONNS; i++) std::make_shared<Conn>(io, i, &ok[i])->start(ep);
    asio::steady_timer deadline(io, std::chrono::seconds(60));
    deadline.async_wait([&](std::error_code ec) { if (!ec) io.stop(); });
    std::thread t([&] { io.run(); });
    for (;;) {   // the timer keeps run() going: stop once every connection reported
        bool all = true;
        for (bool b : ok) all = all && b;
        if (all || io.stopped()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    io.stop();
    t.join();
    bool all = true;
    for (bool b : ok) all = all && b;
    std::puts(all ? "OK" : "MISMATCH");
    return all ? 0 : 1;
}
"""


@program("asio", source="Debian libasio-dev (standalone asio, C++)", model="asio's io_context (epoll reactor), "
         "two threads in the server",
         how="asio's async echo server and an async client of 6 connections of 2 MiB (first round trip, then "
             "async_write of the rest, shutdown, async_read_some to EOF), built with g++ in the test; every byte "
             "compared",
         tools=[("g++", "g++")])
def asio(cx):
    if not os.path.exists("/usr/include/asio.hpp"):
        missing("asio.hpp is not installed (Debian package libasio-dev; scripts/install-deps installs it)")
    d = built("asio-echo", {"echo.cpp": ASIO_ECHO},
              lambda d: sh(["g++", "-std=c++17", "-O1", "-pthread", "-o", d / "echo", d / "echo.cpp"], d,
                           what="g++ asio echo"))
    echo(cx, [d / "echo", "server"], [d / "echo", "client"], "asio")
    cx.accelerated(6)


# ------------------------------------------------------------------- tokio

# The program, its Cargo.toml and the Cargo.lock that pins its crates live in
# tests/programs/tokio-echo/ (why those versions: its Cargo.toml).
TOKIO_SOURCES = ("Cargo.toml", "Cargo.lock", "src/main.rs")


def cargo_env(d):
    """The environment of the cargo build: crates.io's index over HTTP (the
    sparse protocol) whichever cargo it is.  Debian 12's cargo 1.65 still
    fetches the git index from github.com unless told (CI machines may reach
    crates.io but not GitHub); the unstable variable is what tells it, which
    Debian's build allows and a newer cargo, where sparse is the default,
    ignores; the protocol setting is for cargo 1.68 and 1.69."""
    return base_env(CARGO_TARGET_DIR=str(d / "target"), CARGO_TERM_COLOR="never",
                    CARGO_UNSTABLE_SPARSE_REGISTRY="true", CARGO_REGISTRIES_CRATES_IO_PROTOCOL="sparse")


@program("tokio", source="crates.io tokio 1.38 (Rust)", model="tokio's multi-threaded runtime (mio, epoll), 2 workers",
         how="a tokio echo server (io::copy on split halves) and client of 6 connections of 2 MiB (first round "
             "trip, a writer task, read_to_end), built with cargo in the test (about 15 s the first time); every "
             "byte compared",
         tools=[("cargo", "cargo"), ("rustc", "rustc")])
def tokio(cx):
    def build(d):
        sh(["cargo", "build", "--release", "--quiet", "--locked"], d, env=cargo_env(d), timeout=240,
           what="cargo build (tokio echo)")
    src = PROGRAMS_DIR / "tokio-echo"
    d = built("tokio-echo", {f: (src / f).read_text() for f in TOKIO_SOURCES}, build)
    exe = d / "target" / "release" / "tokio-echo"
    echo(cx, [exe, "server"], [exe, "client"], "tokio")
    cx.accelerated(6)


# ---------------------------------------------------------------- Java NIO

JAVA_ECHO = r"""
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.util.*;

public class Echo {
    static final int FIRST = 65536, SIZE = 2 << 20, CONNS = 6;

    static byte[] payload(int seed, int n) {
        byte[] b = new byte[n];
        int x = seed * (int) 2654435761L + 1;
        for (int i = 0; i < n; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; b[i] = (byte) x; }
        return b;
    }

    // The server: one thread, a Selector over non-blocking channels.
    static final class Conn { ByteBuffer buf = ByteBuffer.allocate(65536); boolean eof; }

    static void server() throws IOException {
        Selector sel = Selector.open();
        ServerSocketChannel ss = ServerSocketChannel.open();
        ss.bind(new InetSocketAddress("127.0.0.1", 0));
        ss.configureBlocking(false);
        ss.register(sel, SelectionKey.OP_ACCEPT);
        System.out.println("PORT " + ((InetSocketAddress) ss.getLocalAddress()).getPort());
        System.out.flush();
        while (true) {
            sel.select();
            Iterator<SelectionKey> it = sel.selectedKeys().iterator();
            while (it.hasNext()) {
                SelectionKey k = it.next();
                it.remove();
                if (!k.isValid()) continue;
                if (k.isAcceptable()) {
                    SocketChannel c = ss.accept();
                    if (c == null) continue;
                    c.configureBlocking(false);
                    c.register(sel, SelectionKey.OP_READ, new Conn());
                    continue;
                }
                SocketChannel c = (SocketChannel) k.channel();
                Conn st = (Conn) k.attachment();
                try {
                    if (k.isReadable() && !st.eof && st.buf.hasRemaining()) {
                        if (c.read(st.buf) < 0) st.eof = true;
                    }
                    st.buf.flip();
                    c.write(st.buf);
                    st.buf.compact();
                    if (st.eof && st.buf.position() == 0) {   // everything echoed: half-close back, then done
                        c.shutdownOutput();
                        c.close();
                        continue;
                    }
                    int ops = 0;
                    if (!st.eof && st.buf.hasRemaining()) ops |= SelectionKey.OP_READ;
                    if (st.buf.position() > 0) ops |= SelectionKey.OP_WRITE;
                    k.interestOps(ops);
                } catch (IOException e) {
                    c.close();
                }
            }
        }
    }

    // The client: a thread per connection, blocking channels, a writer thread each.
    static boolean one(int port, int i) throws Exception {
        byte[] want = payload(i, SIZE + i);
        SocketChannel c = SocketChannel.open(new InetSocketAddress("127.0.0.1", port));
        c.write(ByteBuffer.wrap(want, 0, FIRST));
        ByteBuffer got = ByteBuffer.allocate(want.length);
        got.limit(FIRST);
        while (got.hasRemaining()) if (c.read(got) < 0) return false;
        Thread w = new Thread(() -> {
            try {
                ByteBuffer rest = ByteBuffer.wrap(want, FIRST, want.length - FIRST);
                while (rest.hasRemaining()) c.write(rest);
                c.shutdownOutput();
            } catch (IOException e) { throw new RuntimeException(e); }
        });
        w.start();
        got.limit(want.length);
        ByteBuffer extra = ByteBuffer.allocate(1);
        while (true) {
            int n = got.hasRemaining() ? c.read(got) : c.read(extra);
            if (n < 0) break;
            if (extra.position() > 0) return false;
        }
        w.join();
        c.close();
        return got.position() == want.length && Arrays.equals(got.array(), want);
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("server")) { server(); return; }
        int port = Integer.parseInt(args[1]);
        List<Thread> ts = new ArrayList<>();
        boolean[] ok = new boolean[CONNS];
        for (int i = 0; i < CONNS; i++) {
            final int k = i;
            Thread t = new Thread(() -> { try { ok[k] = one(port, k); } catch (Exception e) { e.printStackTrace(); } });
            t.start();
            ts.add(t);
        }
        boolean all = true;
        for (int i = 0; i < CONNS; i++) { ts.get(i).join(60000); all &= ok[i]; }
        System.out.println(all ? "OK" : "MISMATCH");
        System.exit(all ? 0 : 1);
    }
}
"""


@program("Java NIO", source="Debian openjdk-17-jdk-headless (javac)", model="the JDK's NIO Selector (epoll) in one "
         "thread; blocking SocketChannels in threads for the client",
         how="a Selector echo server (partial writes, OP_WRITE, shutdownOutput at EOF) and a client of 6 "
             "connections of 2 MiB (a writer thread each), compiled with javac in the test; every byte compared",
         tools=[("javac", "default-jdk-headless"), ("java", "default-jdk-headless")])
def java_nio(cx):
    d = built("java-nio-echo", {"Echo.java": JAVA_ECHO},
              lambda d: sh(["javac", "-d", d, d / "Echo.java"], d, what="javac Echo.java", timeout=120))
    java = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", d, "Echo"]
    echo(cx, java + ["server"], java + ["client"], "java")
    cx.accelerated(6)


# ------------------------------------------------------------------ Go cgo

GO_MOD = "module corpusecho\n\ngo 1.19\n"

GO_ECHO = r"""
package main

// #include <stdlib.h>
import "C"

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

const first, size, conns = 65536, 2 << 20, 6

func payload(seed uint32, n int) []byte {
	b := make([]byte, n)
	x := seed*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func one(addr string, i int) bool {
	want := payload(uint32(i), size+i)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	c.Write(want[:first])
	got := make([]byte, first, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return false
	}
	go func() {
		c.Write(want[first:])
		c.(*net.TCPConn).CloseWrite()
	}()
	rest, err := io.ReadAll(c)
	return err == nil && bytes.Equal(append(got, rest...), want)
}

func main() {
	C.free(C.malloc(1)) // a cgo binary: dynamically linked with libc
	if os.Args[1] == "server" {
		l, err := net.Listen("tcp", "localhost:0") // the cgo resolver (GODEBUG=netdns=cgo) finds localhost
		if err != nil {
			panic(err)
		}
		fmt.Println("PORT", l.Addr().(*net.TCPAddr).Port)
		for {
			c, err := l.Accept()
			if err != nil {
				continue
			}
			go func(c net.Conn) {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				c.Close()
			}(c)
		}
	}
	addr := "localhost:" + os.Args[2]
	done := make(chan bool)
	for i := 0; i < conns; i++ {
		go func(i int) { done <- one(addr, i) }(i)
	}
	ok := true
	for i := 0; i < conns; i++ {
		ok = <-done && ok
	}
	if ok {
		fmt.Println("OK")
	} else {
		fmt.Println("MISMATCH")
		os.Exit(1)
	}
}
"""


@program("Go (cgo)", source="Debian golang-go", model="the Go runtime's netpoller (epoll) and goroutines; cgo for "
         "the resolver and libc",
         how="a Go echo server and client built with CGO_ENABLED=1, names resolved by the cgo resolver "
             "(GODEBUG=netdns=cgo), 6 connections of 2 MiB between them, every byte compared; then each against a "
             "Python peer under shunt: the Python end records the reason. libshunt is loaded (the binary is dynamic) "
             "but Go makes its socket calls as system calls of its own, not through libc",
         expect="fallback: no accelerated listener / client does not run shunt",
         tools=["go", ("gcc", "gcc")])
def go_cgo(cx):
    def build(d):
        env = base_env(CGO_ENABLED="1", GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="-mod=mod")
        if not os.access(os.path.expanduser("~"), os.W_OK):
            env["GOCACHE"] = str(d / "gocache")
        sh(["go", "build", "-o", d / "echo", "."], d, env=env, timeout=240, what="go build (cgo echo)")
    d = built("go-cgo-echo", {"go.mod": GO_MOD, "main.go": GO_ECHO}, build)
    exe = d / "echo"
    env = cx.env(GODEBUG="netdns=cgo")
    srv, port = echo(cx, [exe, "server"], [exe, "client"], "go", env=env)
    assert maps_has_libshunt(srv.pid), "the cgo binary did not load libshunt"
    assert not cx.pairs(), "a Go connection was accelerated"
    # a Python client under shunt finds no listener of shunt's at the Go server ...
    cx.echo_client(port, conns=2, size=1 << 20)
    cx.fell_back("no accelerated listener", count=2)
    # ... and a Python server under shunt finds no offer from the Go client
    py = cx.port()
    cx.echo_server(py)
    r = cx.run([exe, "client", py], env=env, timeout=90)
    assert r.stdout.decode().strip() == "OK", r.stdout
    cx.fell_back("client does not run shunt", count=6)


@pytest.mark.parametrize("prog", [p.param() for p in PROGRAMS])
def test_program(prog, shunt, tmp_path, start_server, corpus_cache):
    run_program(prog, shunt, tmp_path, start_server, corpus_cache)
