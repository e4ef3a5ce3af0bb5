"""OpenSSH's sshd under shunt (issue 17, item 1): its pre-authentication
child chroots, drops privileges and installs a seccomp filter that kills the
process on any call it does not expect (the privilege-separation sandbox).
Before the fix every login failed, with SHUNT_ACCEL=0 too: sshd logged
"privsep_preauth: preauth child terminated by signal 31" (SIGSYS), the
child having been killed for shunt's own unlink of its fd table at exit
(passthrough) or its fcntl(F_DUPFD_CLOEXEC) of a private fd (accelerated).

Debian's sshd and ssh, both under `shunt run`, on 127.0.0.1 with a config of
the test's own (its host key, an authorized_keys for root, UsePAM no, a free
port), with SHUNT_ACCEL=0 and 1, two logins in a row: `echo ok; head -c
100000 /dev/urandom | sha256sum` (the issue's command), then the same with a
deterministic 3 MB through the remote sha256sum and 2 MB of zeros back; sshd
must still run and never have lost a child to a signal.  Accelerated, the client's log
must show the connection accelerated, then moved back to kernel TCP by the
pre-authentication child before its filter came (the rest of the session is
kernel TCP).

Root only (sshd's privilege separation needs it); scripts/install-deps
installs openssh-server and openssh-client; without them the test is
skipped, except in CI (CI set), where a missing tool fails it."""
import hashlib
import os
import re
import shutil

import pytest

from shunttest import base_env, free_port, run_cmd

SSHD = "/usr/sbin/sshd"

CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PidFile none
StrictModes no
"""


def missing(message):
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def sshd_setup(tmp_path):
    if os.geteuid() != 0:
        missing("sshd's privilege separation needs root")
    ssh, keygen = shutil.which("ssh"), shutil.which("ssh-keygen")
    if not os.access(SSHD, os.X_OK) or not ssh or not keygen:
        missing("openssh-server and openssh-client are needed (scripts/install-deps installs them)")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # the privilege-separation chroot
    for name in ("host_key", "user_key"):
        r = run_cmd([keygen, "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / name], timeout=30)
        assert r.returncode == 0, r.stderr
    shutil.copy(tmp_path / "user_key.pub", tmp_path / "authorized_keys")
    os.chmod(tmp_path / "authorized_keys", 0o600)
    port = free_port()
    (tmp_path / "sshd_config").write_text(CONFIG.format(port=port, dir=tmp_path))
    r = run_cmd([SSHD, "-t", "-f", tmp_path / "sshd_config"], timeout=30)
    assert r.returncode == 0, r.stderr
    return ssh, port


@pytest.mark.parametrize("accel", ["0", "1"])
def test_sshd_login(shunt, tmp_path, start_server, sshd_setup, accel):
    ssh, port = sshd_setup
    srv = start_server(shunt.cmd([SSHD, "-D", "-e", "-f", tmp_path / "sshd_config"]),
                       env=base_env(SHUNT_ACCEL=accel), name="sshd")
    srv.wait_port(port)
    client_env = base_env(SHUNT_ACCEL=accel, SHUNT_LOG="info")   # the log on ssh's stderr

    def login(command, data=None):
        argv = shunt.cmd([ssh, "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
                          "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                          "-o", "ConnectTimeout=20", "-i", tmp_path / "user_key", "-p", str(port),
                          "root@127.0.0.1", command])
        r = run_cmd(argv, timeout=60, input=data, env=client_env)
        assert r.returncode == 0, ("ssh status %d" % r.returncode, r.stderr.decode(errors="replace")[-3000:],
                                   srv.describe())
        return r

    issue = "echo ok; head -c 100000 /dev/urandom | sha256sum"
    r = login(issue)
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 2 and lines[0] == "ok" and re.fullmatch(r"[0-9a-f]{64}  -", lines[1]), r.stdout
    # and bytes both ways, checked
    up = bytes((i * 131 + (i >> 9)) % 251 for i in range(3 * 1024 * 1024))
    r = login(issue + "; sha256sum; head -c 2000000 /dev/zero", data=up)
    head = r.stdout[:200].split(b"\n")[:3]
    assert head[0] == b"ok" and re.fullmatch(rb"[0-9a-f]{64}  -", head[1]), r.stdout[:200]
    assert head[2] == hashlib.sha256(up).hexdigest().encode() + b"  -", (head, hashlib.sha256(up).hexdigest())
    assert r.stdout[sum(len(h) + 1 for h in head):] == bytes(2000000)
    log = r.stderr.decode(errors="replace")

    assert srv.proc.poll() is None, "sshd died:\n" + srv.describe()
    assert "terminated by signal" not in srv.stderr(), srv.describe()
    if accel == "1":
        assert "accelerated (client" in log, log[-3000:]
        assert "the peer left for a program without shunt" in log, log[-3000:]
