// A room chat over the node ws library, served over https (wss://) and
// plain http (ws://, to record a session through the plaintext record
// proxy) at once, the rooms shared, for cmd/replay's TLS tests. JSON text
// messages, as testdata/wsdeflate's:
//   client {"type":"join","user":U,"room":R}  -> {"type":"joined","room":R}
//   client {"type":"chat","text":T,"ts":S}    -> {"type":"msg","from":U,"text":T,"ts":S} to the room's others
// GET /stats answers the counters (connections over TLS counted apart),
// GET /reset zeroes them.
//
//   node server.js HTTP_PORT HTTPS_PORT CERT KEY
"use strict";
const fs = require("fs");
const http = require("http");
const https = require("https");
const { WebSocketServer } = require("ws");

const [httpPort, httpsPort, cert, key] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4], process.argv[5]];
let stats;
const seen = new Set();
const reset = () => {
  stats = { connected: 0, peak: 0, tls: 0, users: 0, joins: 0, chats: 0, delivered: 0, errors: 0 };
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
  const wss = new WebSocketServer({ server, perMessageDeflate: false });
  wss.on("connection", (ws) => {
    stats.connected++;
    stats.peak = Math.max(stats.peak, stats.connected);
    if (secure) stats.tls++;
    let me = null;
    ws.on("error", () => stats.errors++);
    ws.on("message", (data) => {
      let m;
      try { m = JSON.parse(data.toString()); } catch { stats.errors++; ws.close(1003, "not json"); return; }
      if (m.type === "join") {
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
serve(https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, handler), true).listen(httpsPort, "127.0.0.1");
process.on("SIGINT", () => process.exit(0));
