// goecho: an echo peer written in Go (stdlib only).
//
// Built with CGO_ENABLED=0 it is a static binary that makes raw system
// calls and never goes through libc, so an LD_PRELOAD library such as
// libshunt.so cannot intercept it.  The integration tests use it as the
// "other side" of connections whose peer runs under shunt.
//
// The wire protocol is shared with tests/programs/static_peer.c and
// tests/programs/pyecho.py:
//
//   - a connection carries one byte stream from the client; byte number i
//     of that stream (counting from 0 on every connection) is
//     table[i % 65521], table[j] = byte((uint32(j) * 2654435761) >> 16);
//   - the server echoes every byte back, verifies the stream against the
//     pattern and, when the client half-closes (EOF), shuts down its own
//     write side and logs "CONN <n> RECV <bytes> OK" (or "... BAD <off>");
//   - the client sends N bytes, half-closes, reads until EOF and checks
//     that exactly the N bytes it sent came back.
//
// Usage:
//
// Both roles first print "LIBSHUNT_MAPPED yes|no": whether libshunt.so is
// in /proc/self/maps (for this program: always "no", even under shunt).
//
//	goecho server [-host 127.0.0.1] [-port 0]
//	    prints "LISTENING <port>" once it accepts connections.
//	goecho client -host H -port P [-bytes N] [-mode bulk|pingpong|halfclose]
//	              [-chunk C] [-conns K] [-timeout SECONDS]
//	    prints "CLIENT OK conns=K bytes=N mode=M" and exits 0, or prints
//	    "CLIENT FAIL ..." to stderr and exits 1.
//
// Kept compatible with Go 1.19 (no min/max builtins, no slices package).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const period = 65521

var table = func() []byte {
	t := make([]byte, period)
	for j := 0; j < period; j++ {
		t[j] = byte((uint32(j) * 2654435761) >> 16)
	}
	return t
}()

// fill writes the pattern for stream offsets [off, off+len(b)) into b.
func fill(b []byte, off int64) {
	j := int(off % period)
	for i := range b {
		b[i] = table[j]
		j++
		if j == period {
			j = 0
		}
	}
}

// check returns the index of the first byte of b that does not match the
// pattern at stream offset off, or -1.
func check(b []byte, off int64) int {
	j := int(off % period)
	for i := range b {
		if b[i] != table[j] {
			return i
		}
		j++
		if j == period {
			j = 0
		}
	}
	return -1
}

var outMu sync.Mutex
var out = bufio.NewWriter(os.Stdout)

func logf(format string, a ...interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(out, format+"\n", a...)
	out.Flush()
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "CLIENT FAIL "+format+"\n", a...)
	os.Exit(1)
}

func serve(c *net.TCPConn, n int) {
	defer c.Close()
	buf := make([]byte, 65536)
	var total int64
	bad := int64(-1)
	for {
		c.SetDeadline(time.Now().Add(120 * time.Second))
		k, err := c.Read(buf)
		if k > 0 {
			if bad < 0 {
				if i := check(buf[:k], total); i >= 0 {
					bad = total + int64(i)
				}
			}
			if _, werr := c.Write(buf[:k]); werr != nil {
				logf("CONN %d ERROR write: %v", n, werr)
				return
			}
			total += int64(k)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			logf("CONN %d ERROR read: %v", n, err)
			return
		}
	}
	c.CloseWrite()
	if bad >= 0 {
		logf("CONN %d RECV %d BAD %d", n, total, bad)
	} else {
		logf("CONN %d RECV %d OK", n, total)
	}
}

func server(args []string) {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "address to bind")
	port := fs.Int("port", 0, "port (0: any)")
	fs.Parse(args)
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "listen: %v\n", err)
		os.Exit(2)
	}
	logf("LISTENING %d", ln.Addr().(*net.TCPAddr).Port)
	n := 0
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "accept: %v\n", err)
			os.Exit(2)
		}
		n++
		go serve(c.(*net.TCPConn), n)
	}
}

// readFull reads exactly len(b) bytes or fails.
func readFull(c *net.TCPConn, b []byte) error {
	_, err := io.ReadFull(c, b)
	return err
}

func verifyEOF(c *net.TCPConn) error {
	var one [1]byte
	k, err := c.Read(one[:])
	if k != 0 {
		return fmt.Errorf("extra data after the echo")
	}
	if err != io.EOF {
		return fmt.Errorf("expected EOF, got %v", err)
	}
	return nil
}

func oneConn(addr string, nbytes int64, mode string, chunk int, timeout time.Duration) error {
	d, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return fmt.Errorf("dial: %v", err)
	}
	c := d.(*net.TCPConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	switch mode {
	case "bulk":
		// Write and read concurrently so that neither side's buffers fill up.
		werr := make(chan error, 1)
		go func() {
			buf := make([]byte, chunk)
			var off int64
			for off < nbytes {
				k := int64(chunk)
				if nbytes-off < k {
					k = nbytes - off
				}
				fill(buf[:k], off)
				if _, err := c.Write(buf[:k]); err != nil {
					werr <- fmt.Errorf("write at %d: %v", off, err)
					return
				}
				off += k
			}
			werr <- c.CloseWrite()
		}()
		buf := make([]byte, 65536)
		var got int64
		for {
			k, err := c.Read(buf)
			if k > 0 {
				if got+int64(k) > nbytes {
					return fmt.Errorf("received more than sent (%d > %d)", got+int64(k), nbytes)
				}
				if i := check(buf[:k], got); i >= 0 {
					return fmt.Errorf("echo mismatch at offset %d", got+int64(i))
				}
				got += int64(k)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("read at %d: %v", got, err)
			}
		}
		if err := <-werr; err != nil {
			return err
		}
		if got != nbytes {
			return fmt.Errorf("echoed %d bytes, sent %d", got, nbytes)
		}
		return nil
	case "pingpong":
		sbuf := make([]byte, chunk)
		rbuf := make([]byte, chunk)
		var off int64
		for i := 0; off < nbytes; i++ {
			k := int64(1 + (i*37)%chunk)
			if nbytes-off < k {
				k = nbytes - off
			}
			fill(sbuf[:k], off)
			if _, err := c.Write(sbuf[:k]); err != nil {
				return fmt.Errorf("write at %d: %v", off, err)
			}
			if err := readFull(c, rbuf[:k]); err != nil {
				return fmt.Errorf("read at %d: %v", off, err)
			}
			if i := check(rbuf[:k], off); i >= 0 {
				return fmt.Errorf("echo mismatch at offset %d", off+int64(i))
			}
			off += k
		}
		if err := c.CloseWrite(); err != nil {
			return fmt.Errorf("shutdown: %v", err)
		}
		return verifyEOF(c)
	case "halfclose":
		// Send everything, half-close, and only then read the echo: the
		// server must still be able to send after our FIN.
		buf := make([]byte, nbytes)
		fill(buf, 0)
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write: %v", err)
		}
		if err := c.CloseWrite(); err != nil {
			return fmt.Errorf("shutdown: %v", err)
		}
		for i := range buf {
			buf[i] = 0
		}
		if err := readFull(c, buf); err != nil {
			return fmt.Errorf("read echo: %v", err)
		}
		if i := check(buf, 0); i >= 0 {
			return fmt.Errorf("echo mismatch at offset %d", i)
		}
		return verifyEOF(c)
	}
	return errors.New("unknown mode " + mode)
}

func client(args []string) {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "server address")
	port := fs.Int("port", 0, "server port")
	nbytes := fs.Int64("bytes", 1<<20, "bytes per connection")
	mode := fs.String("mode", "bulk", "bulk|pingpong|halfclose")
	chunk := fs.Int("chunk", 65536, "write size (pingpong: maximum message size)")
	conns := fs.Int("conns", 1, "sequential connections")
	timeout := fs.Float64("timeout", 60, "seconds allowed per connection")
	fs.Parse(args)
	if *port == 0 || *chunk <= 0 || *nbytes < 0 {
		die("bad arguments")
	}
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	for i := 0; i < *conns; i++ {
		err := oneConn(addr, *nbytes, *mode, *chunk, time.Duration(*timeout*float64(time.Second)))
		if err != nil {
			die("conn %d: %v", i+1, err)
		}
	}
	logf("CLIENT OK conns=%d bytes=%d mode=%s", *conns, *nbytes, *mode)
}

// libshuntMapped tells whether libshunt.so is mapped into this process
// (it never should be: this program does not use the dynamic loader).
func libshuntMapped() string {
	b, err := os.ReadFile("/proc/self/maps")
	if err == nil && strings.Contains(string(b), "libshunt.so") {
		return "yes"
	}
	return "no"
}

func main() {
	if len(os.Args) >= 2 {
		logf("LIBSHUNT_MAPPED %s", libshuntMapped())
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: goecho server|client [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "server":
		server(os.Args[2:])
	case "client":
		client(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: goecho server|client [flags]")
		os.Exit(2)
	}
}
