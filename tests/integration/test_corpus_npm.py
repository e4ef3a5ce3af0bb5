"""The corpus (corpus.py): Node.js (libuv) with packages from npm
(scripts/install-deps installs them with `npm install -g`; the scripts find
them through NODE_PATH), and Node's own cluster module.  Both ends under
shunt."""
import json
import os

import pytest

from corpus import npm_root, postgres, registry, run_program

PROGRAMS, program = registry()

# Shared by the scripts: a payload made from a seed (xorshift32), so that
# client and server agree on it without sending it twice.
PRELUDE = r"""
const crypto = require('crypto');
function payload(seed, n) {
  const b = Buffer.alloc(n);
  let x = (seed * 2654435761 + 1) >>> 0 || 1;
  for (let i = 0; i < n; i++) { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; b[i] = x & 255; }
  return b;
}
function digest(b) { return crypto.createHash('sha256').update(b).digest('hex'); }
const deadline = setTimeout(() => { console.log('TIMEOUT'); process.exit(3); }, 60000);
function done(ok) { clearTimeout(deadline); console.log(ok ? 'OK' : 'MISMATCH'); process.exit(ok ? 0 : 1); }
"""


def node_env(cx, **extra):
    return cx.env(NODE_PATH=npm_root() or "", **extra)


def node_server(cx, name, body, *args):
    path = cx.write(name, PRELUDE.replace("const deadline", "const unused_deadline").replace(
        "60000);", "3600000); unused_deadline.unref();") + body)
    srv = cx.serve(["node", path] + [str(a) for a in args], name, env=node_env(cx))
    return srv


def node_client(cx, name, body, *args, timeout=90):
    path = cx.write(name, PRELUDE + body)
    r = cx.run(["node", path] + [str(a) for a in args], env=node_env(cx), timeout=timeout)
    out = r.stdout.decode()
    assert out.strip().splitlines()[-1:] == ["OK"], (out[-3000:], r.stderr.decode()[-3000:])
    return out


# ---------------------------------------------------------------- express

EXPRESS_SERVER = r"""
const express = require('express');
const app = express();
const BIG = payload(7, 4 << 20);
app.get('/data', (req, res) => res.type('application/octet-stream').send(BIG));
app.get('/small', (req, res) => res.send('shunt '.repeat(40)));
app.post('/echo', (req, res) => {
  const h = crypto.createHash('sha256');
  req.on('data', (d) => h.update(d));
  req.on('end', () => res.send(h.digest('hex')));
});
const srv = app.listen(0, '127.0.0.1', () => console.log('PORT', srv.address().port));
"""

EXPRESS_CLIENT = r"""
const http = require('http');
const port = parseInt(process.argv[2]);
const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
function get() {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/data', agent }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve(digest(Buffer.concat(parts)) === digest(payload(7, 4 << 20))));
    }).on('error', reject);
  });
}
function post(i) {   // Expect: 100-continue, the body once the server asked for it
  const body = payload(i, 3 << 20);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/echo', method: 'POST', agent,
                               headers: { 'Content-Length': body.length, 'Expect': '100-continue' } }, (res) => {
      let text = '';
      res.on('data', (d) => text += d);
      res.on('end', () => resolve(text === digest(body)));
    });
    req.on('continue', () => req.end(body));
    req.on('error', reject);
  });
}
(async () => {
  const rs = await Promise.all([get(), get(), get(), get(), post(1), post(2), post(3), post(4)]);
  agent.destroy();
  done(rs.every(Boolean));
})();
"""


@program("express (+ autocannon)", source="npm express, autocannon; Node.js", model="Node.js's libuv loop, one thread",
         how="an express app: Node's http client GETs 4 MiB 4 times and POSTs 3 MiB 4 times (4 keep-alive sockets, "
             "sha256 of each body); autocannon 2000 requests on 8 connections, all 2xx, no errors",
         npm=["express", "autocannon"])
def express(cx):
    srv = node_server(cx, "express_server.js", EXPRESS_SERVER)
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    node_client(cx, "express_client.js", EXPRESS_CLIENT, port)
    cannon = os.path.join(npm_root(), "autocannon", "autocannon.js")
    r = cx.run(["node", cannon, "-c", "8", "-a", "2000", "-j", "http://127.0.0.1:%d/small" % port],
               env=node_env(cx), timeout=90)
    res = json.loads(r.stdout.decode())
    assert res["requests"]["total"] == 2000 and res["non2xx"] == 0 and res["errors"] == 0, res
    assert res["timeouts"] == 0 and res["2xx"] == 2000, res
    cx.accelerated(12)


# --------------------------------------------------------------------- ws

WS_SERVER = r"""
const { WebSocketServer } = require('ws');
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 64 << 20 });
wss.on('connection', (ws) => ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary })));
wss.on('listening', () => console.log('PORT', wss.address().port));
"""

WS_CLIENT = r"""
const WebSocket = require('ws');
const port = parseInt(process.argv[2]);
function one(k) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket('ws://127.0.0.1:' + port + '/', { maxPayload: 64 << 20 });
    let i = 0, want;
    const next = () => { want = payload(k * 1000 + i, 1 + (i * 15013) % 300000); ws.send(want); };
    ws.on('open', next);
    ws.on('message', (m) => {
      if (!Buffer.from(m).equals(want)) { resolve(false); ws.close(); return; }
      if (++i === 60) { ws.close(); resolve(true); } else next();
    });
    ws.on('error', reject);
  });
}
Promise.all([one(0), one(1), one(2)]).then((rs) => done(rs.every(Boolean)));
"""


@program("ws", source="npm ws; Node.js", model="Node.js's libuv loop",
         how="a ws WebSocketServer echo and 3 ws clients, 60 binary messages each up to 300 KB, compared",
         npm=["ws"])
def ws(cx):
    srv = node_server(cx, "ws_server.js", WS_SERVER)
    port = int(srv.wait_for(r"^PORT (\d+)$").group(1))
    node_client(cx, "ws_client.js", WS_CLIENT, port)
    cx.accelerated(3)


# ------------------------------------------------------------------- mqtt

MQTT_CLIENT = r"""
const mqtt = require('mqtt');
const port = parseInt(process.argv[2]);
const url = 'mqtt://127.0.0.1:' + port;
const msgs = [...Array(200).keys()].map((i) => payload(i, 1 + (i * 7919) % 200000));
const got = [];
const sub = mqtt.connect(url, { clientId: 'corpus-sub' });
sub.on('message', (t, m) => {
  got.push(Buffer.from(m));
  if (got.length === msgs.length) {
    const ok = got.every((g, i) => g.equals(msgs[i]));
    sub.end(); pub.end(); done(ok);
  }
});
let pub;
sub.on('connect', () => sub.subscribe('corpus/js', { qos: 1 }, async () => {
  pub = mqtt.connect(url, { clientId: 'corpus-pub' });
  pub.on('connect', async () => {
    for (const m of msgs) await pub.publishAsync('corpus/js', m, { qos: 1 });
  });
}));
"""


@program("mqtt.js", source="npm mqtt; Debian mosquitto", model="Node.js's libuv loop against mosquitto's loop",
         how="a subscriber and a publisher (QoS 1) in one Node.js process: 200 messages up to 200 KB, in order, "
             "compared",
         npm=["mqtt"], tools=["mosquitto"])
def mqtt_js(cx):
    port = cx.port()
    user = "user root" if os.geteuid() == 0 else ""
    conf = cx.write("mosquitto.conf", "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n%s\n"
                    % (port, user))
    cx.serve(["mosquitto", "-c", conf], "mosquitto", port=port)
    node_client(cx, "mqtt_client.js", MQTT_CLIENT, port)
    cx.accelerated(2)


# --------------------------------------------------------------------- pg

PG_CLIENT = r"""
const { Client, Pool } = require('pg');
const port = parseInt(process.argv[2]);
const cfg = { host: '127.0.0.1', port, user: 'postgres', database: 'postgres' };
(async () => {
  const c = new Client(cfg);
  await c.connect();
  await c.query('create table blobs (id int primary key, data bytea)');
  const blobs = [...Array(4).keys()].map((i) => payload(i, (1 << 20) + i));
  for (let i = 0; i < blobs.length; i++) await c.query('insert into blobs values ($1, $2)', [i, blobs[i]]);
  const r = await c.query('select id, data, encode(sha256(data), \'hex\') as h from blobs order by id');
  let ok = r.rows.length === 4 && r.rows.every((row, i) => row.data.equals(blobs[i]) && row.h === digest(blobs[i]));
  await c.end();
  const pool = new Pool({ ...cfg, max: 4 });
  const qs = [...Array(40).keys()].map((i) => pool.query('select $1::int * 2 as v, md5($2) as m', [i, 'x' + i]));
  const rs = await Promise.all(qs);
  ok = ok && rs.every((q, i) => q.rows[0].v === 2 * i &&
                       q.rows[0].m === crypto.createHash('md5').update('x' + i).digest('hex'));
  await pool.end();
  done(ok);
})().catch((e) => { console.log(e.stack); done(false); });
"""


@program("node-postgres (pg)", source="npm pg; Debian postgresql", model="Node.js's libuv loop against PostgreSQL's "
         "backend per connection",
         how="as nobody: a Client inserts 4 bytea values of 1 MiB and reads them back with their sha256 computed by "
             "the server; a Pool of 4 runs 40 parameterised queries at once; all compared",
         npm=["pg"])
def node_pg(cx):
    port = postgres(cx)
    node_client(cx, "pg_client.js", PG_CLIENT, port)
    cx.accelerated(5)


# ---------------------------------------------------------------- ioredis

IOREDIS_CLIENT = r"""
const Redis = require('ioredis');
const port = parseInt(process.argv[2]);
(async () => {
  const r = new Redis({ host: '127.0.0.1', port });
  const p = r.pipeline();
  for (let i = 0; i < 2000; i++) p.set('k' + i, payload(i, 1 + i % 900));
  await p.exec();
  const q = r.pipeline();
  for (let i = 0; i < 2000; i++) q.getBuffer('k' + i);
  const got = await q.exec();
  let ok = got.every(([err, v], i) => !err && v.equals(payload(i, 1 + i % 900)));
  const big = payload(99, 8 << 20);
  await r.set('big', big);
  ok = ok && (await r.getBuffer('big')).equals(big);
  const sub = new Redis({ host: '127.0.0.1', port });
  const msgs = [...Array(100).keys()].map((i) => payload(300 + i, 1 + i * 97));
  const recv = [];
  await sub.subscribe('corpus');
  const all = new Promise((resolve) => sub.on('messageBuffer', (ch, m) => {
    recv.push(m); if (recv.length === msgs.length) resolve();
  }));
  for (const m of msgs) await r.publish('corpus', m);
  await all;
  ok = ok && recv.every((m, i) => m.equals(msgs[i]));
  r.disconnect(); sub.disconnect();
  done(ok);
})().catch((e) => { console.log(e.stack); done(false); });
"""


@program("ioredis", source="npm ioredis; Debian redis-server", model="Node.js's libuv loop against redis-server",
         how="pipelines of 2000 SETs and GETs, an 8 MiB value, pub/sub of 100 messages on a second connection; all "
             "compared",
         npm=["ioredis"], tools=["redis-server"])
def ioredis(cx):
    port = cx.port()
    cx.serve(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis",
             port=port)
    node_client(cx, "ioredis_client.js", IOREDIS_CLIENT, port)
    cx.accelerated(2)


# -------------------------------------------------------- Node.js cluster

CLUSTER_SERVER = r"""
const cluster = require('cluster');
const http = require('http');
cluster.schedulingPolicy = cluster.SCHED_RR;   // the primary accepts and hands each socket to a worker
if (cluster.isPrimary) {
  let up = 0;
  for (let i = 0; i < 2; i++) cluster.fork().on('listening', (a) => { if (++up === 2) console.log('PORT', a.port); });
} else {
  const BIG = payload(7, 1 << 20);
  const srv = http.createServer((req, res) => {
    res.setHeader('X-Worker', String(process.pid));
    res.end(BIG);
  });
  srv.keepAliveTimeout = 1;
  srv.listen(parseInt(process.env.CORPUS_PORT), '127.0.0.1');
}
"""

CLUSTER_CLIENT = r"""
const http = require('http');
const port = parseInt(process.argv[2]);
const want = digest(payload(7, 1 << 20));
function get() {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve([res.headers['x-worker'], digest(Buffer.concat(parts)) === want]));
    }).on('error', reject);
  });
}
(async () => {
  const rs = [];
  for (let i = 0; i < 12; i++) rs.push(await get());
  const workers = new Set(rs.map((r) => r[0]));
  console.log('WORKERS', workers.size);
  done(rs.every((r) => r[1]) && workers.size === 2);
})();
"""


@program("Node.js cluster", source="Node.js (nodejs)", model="a primary process accepting (round robin) and handing "
         "each socket to one of 2 worker processes over IPC (SCM_RIGHTS)",
         how="an http server in 2 cluster workers; 12 requests on fresh connections, 1 MiB each (sha256), served by "
             "both workers",
         tools=[("node", "nodejs")])
def node_cluster(cx):
    port = cx.port()
    path = cx.write("cluster_server.js", PRELUDE.replace("const deadline", "const unused_deadline").replace(
        "60000);", "3600000); unused_deadline.unref();") + CLUSTER_SERVER)
    srv = cx.serve(["node", path], "cluster", env=node_env(cx, CORPUS_PORT=port))
    srv.wait_for(r"^PORT (\d+)$")
    node_client(cx, "cluster_client.js", CLUSTER_CLIENT, port)
    cx.accelerated(12)


@pytest.mark.parametrize("prog", [p.param() for p in PROGRAMS])
def test_program(prog, shunt, tmp_path, start_server, corpus_cache):
    run_program(prog, shunt, tmp_path, start_server, corpus_cache)
