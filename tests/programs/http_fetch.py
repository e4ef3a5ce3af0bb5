#!/usr/bin/env python3
"""Fetch URLs with the stdlib HTTP clients and print what came back.

    http_fetch.py BASE_URL PATH... [--parallel N] [--timeout S]

Prints ``LIBSHUNT_MAPPED yes|no`` (is libshunt.so in /proc/self/maps), then
one line per PATH, in the order given: ``<path> <status> <length> <sha256>``.
GET requests alternate between urllib.request and http.client; with
--parallel N, the paths are fetched by N threads at once.  A final line
``HEAD <path> <status> <content-length>`` comes from a HEAD request on the
first path.  Proxies from the environment are ignored.  Exit status 0 when
every request got an HTTP response, 1 otherwise.
"""

import argparse
import concurrent.futures
import hashlib
import http.client
import sys
import urllib.error
import urllib.parse
import urllib.request


def libshunt_mapped():
    try:
        with open("/proc/self/maps") as f:
            return "libshunt.so" in f.read()
    except OSError:
        return False


def fetch(base, path, i, timeout):
    url = base.rstrip("/") + "/" + urllib.parse.quote(path.lstrip("/"))
    if i % 2 == 0:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=timeout) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
    else:
        u = urllib.parse.urlsplit(url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            c.request("GET", u.path)
            r = c.getresponse()
            status, body = r.status, r.read()
        finally:
            c.close()
    return "%s %d %d %s" % (path, status, len(body), hashlib.sha256(body).hexdigest())


def head(base, path, timeout):
    u = urllib.parse.urlsplit(base.rstrip("/") + "/" + urllib.parse.quote(path.lstrip("/")))
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("HEAD", u.path)
        r = c.getresponse()
        r.read()
        return "HEAD %s %d %s" % (path, r.status, r.getheader("Content-Length"))
    finally:
        c.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("paths", nargs="+")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0)
    a = p.parse_args()
    print("LIBSHUNT_MAPPED %s" % ("yes" if libshunt_mapped() else "no"), flush=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.parallel) as ex:
            lines = list(ex.map(lambda ip: fetch(a.base, ip[1], ip[0], a.timeout),
                                enumerate(a.paths)))
        lines.append(head(a.base, a.paths[0], a.timeout))
    except OSError as e:
        sys.stderr.write("FETCH FAIL %s\n" % e)
        return 1
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
