"""nginx serving a large static file with sendfile on (and tcp_nopush, which corks the
socket) to curl, both under shunt: the bytes arrive exactly (sha256), the connection was
accelerated, and nginx's sendfile calls went straight into the ring (the library's debug
log names each one).  A plain curl at the same time gets the same bytes over kernel TCP."""
import hashlib
import re
import subprocess

from shunttest import base_env, need_tool, nginx_conf, wait_port

SIZE = 48 * 1024 * 1024 + 12345


def test_nginx_sendfile(shunt, tmp_path, start_server, port):
    need_tool("nginx", package="nginx-light")
    need_tool("curl")
    www = tmp_path / "www"
    www.mkdir()
    block = bytes((i * 131 + 7) % 256 for i in range(1 << 16))
    with open(www / "big.bin", "wb") as f:
        left = SIZE
        while left:
            f.write(block[:min(left, len(block))])
            left -= min(left, len(block))
    want = hashlib.sha256((www / "big.bin").read_bytes()).hexdigest()
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_conf(tmp_path, port, daemon=False,
                               locations="sendfile on; tcp_nopush on; sendfile_max_chunk 0;"))
    env = base_env(SHUNT_LOG="debug", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log"))
    ng = start_server(shunt.cmd(["nginx", "-c", str(conf), "-p", str(tmp_path)]), env=env, name="nginx")
    wait_port(port, ng.proc)
    url = "http://127.0.0.1:%d/big.bin" % port
    out = tmp_path / "got"
    r = subprocess.run(shunt.cmd(["curl", "-sS", "--fail", "-o", str(out), url]),
                       env=base_env(SHUNT_LOG="info", SHUNT_LOG_FILE=str(tmp_path / "shunt-%p.log")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == want
    plain = subprocess.run(["curl", "-sS", "--fail", url], env=base_env(), capture_output=True, timeout=120)
    assert plain.returncode == 0 and hashlib.sha256(plain.stdout).hexdigest() == want
    log = "".join(p.read_text(errors="replace") for p in tmp_path.glob("shunt-*.log"))
    assert "accelerated (server" in log and "accelerated (client" in log, log[-3000:]
    into_ring = sum(int(n) for n in re.findall(r"sendfile from fd \d+ into the ring: (\d+)", log))
    assert into_ring >= SIZE, log[-3000:]
