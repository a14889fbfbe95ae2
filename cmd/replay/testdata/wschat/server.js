// A room chat over the node ws library, for cmd/replay's tests no one
// here wrote the server of. JSON text messages:
//   client {"type":"join","user":U,"room":R}  -> {"type":"joined","room":R}
//   client {"type":"chat","text":T,"ts":S}    -> {"type":"msg","from":U,"text":T,"ts":S} to the room's others
// A user id starting "banned" is refused: {"type":"error","reason":"banned"}, close.
// GET /stats answers the counters (connections over TLS and compressed
// ones counted apart), GET /reset zeroes them.
//
//   node server.js HTTP_PORT deflate|plain [HTTPS_PORT CERT KEY]
//
// deflate: permessage-deflate on, every message compressed, the server
// keeping its context as ws does by default; plain: compression off.
// With HTTPS_PORT the same rooms are served over https (wss://) too, so a
// session recorded over plain ws:// through the record proxy replays
// over TLS.
"use strict";
const fs = require("fs");
const http = require("http");
const https = require("https");
const { WebSocketServer } = require("ws");

const [httpPort, mode, httpsPort, cert, key] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4]), process.argv[5], process.argv[6]];
if (mode !== "deflate" && mode !== "plain") {
  console.error("usage: node server.js HTTP_PORT deflate|plain [HTTPS_PORT CERT KEY]");
  process.exit(2);
}
let stats;
const seen = new Set();
const reset = () => {
  stats = { connected: 0, peak: 0, tls: 0, users: 0, joins: 0, chats: 0, delivered: 0, deflated: 0, refused: 0, errors: 0 };
  seen.clear();
};
reset();
const rooms = new Map();

const handler = (req, res) => {
  if (req.url === "/stats") {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify(stats));
  } else if (req.url === "/reset") {
    reset();
    res.end("ok");
  } else {
    res.statusCode = 404;
    res.end();
  }
};

const serve = (server, secure) => {
  const wss = new WebSocketServer({ server, perMessageDeflate: mode === "deflate" ? { threshold: 0 } : false });
  wss.on("connection", (ws) => {
    stats.connected++;
    stats.peak = Math.max(stats.peak, stats.connected);
    if (secure) stats.tls++;
    if (ws.extensions.includes("permessage-deflate")) stats.deflated++;
    let me = null;
    ws.on("error", () => stats.errors++);
    ws.on("message", (data) => {
      let m;
      try { m = JSON.parse(data.toString()); } catch { stats.errors++; ws.close(1003, "not json"); return; }
      if (m.type === "join") {
        if (String(m.user).startsWith("banned")) {
          stats.refused++;
          ws.send(JSON.stringify({ type: "error", reason: "banned" }), () => ws.close());
          return;
        }
        me = { user: String(m.user), room: String(m.room) };
        if (!seen.has(me.user)) { seen.add(me.user); stats.users++; }
        stats.joins++;
        if (!rooms.has(me.room)) rooms.set(me.room, new Set());
        rooms.get(me.room).add(ws);
        ws.send(JSON.stringify({ type: "joined", room: me.room }));
      } else if (m.type === "chat" && me) {
        stats.chats++;
        const out = JSON.stringify({ type: "msg", from: me.user, text: m.text, ts: m.ts });
        for (const peer of rooms.get(me.room)) {
          if (peer !== ws) { peer.send(out); stats.delivered++; }
        }
      }
    });
    ws.on("close", () => {
      stats.connected--;
      if (me) rooms.get(me.room).delete(ws);
    });
  });
  return server;
};

serve(http.createServer(handler), false).listen(httpPort, "127.0.0.1");
if (httpsPort) {
  serve(https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, handler), true).listen(httpsPort, "127.0.0.1");
}
// The tests stop the server with SIGINT: a clean exit, as a Ctrl-C'd
// server's (node's default dies by the signal, which the test reports).
process.on("SIGINT", () => process.exit(0));
