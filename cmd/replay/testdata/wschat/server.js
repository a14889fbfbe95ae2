// A room chat over the node ws library, for cmd/replay's tests no one
// here wrote the server of. JSON text messages:
//   client {"type":"join","user":U,"room":R}  -> {"type":"joined","room":R}
//   client {"type":"chat","text":T,"ts":S}    -> {"type":"msg","from":U,"text":T,"ts":S} to the room's others
// A user id starting "banned" is refused: {"type":"error","reason":"banned"}, close.
// GET /stats answers the counters (connections over TLS and compressed
// ones counted apart), GET /reset zeroes them.
//
//   node server.js HTTP_PORT deflate|plain|cookie [HTTPS_PORT CERT KEY]
//
// deflate: permessage-deflate on, every message compressed, the server
// keeping its context as ws does by default; plain: compression off.
// cookie: plain, and a session cookie is required as a web app's login
// does: POST /login {"user":U} sets sid (single use, bound to U; a user
// starting "nocookie" gets none), GET /me answers the session's user only
// with it (401 without), and the upgrade is refused (401) without a
// session that went through /me; the join's user must be the session's.
// A request whose Cookie header names sid twice is refused (400) and
// counted: a client must not send a recorded cookie beside its own.
// With HTTPS_PORT the same rooms are served over https (wss://) too, so a
// session recorded over plain ws:// through the record proxy replays
// over TLS.
"use strict";
const crypto = require("crypto");
const fs = require("fs");
const http = require("http");
const https = require("https");
const { WebSocketServer } = require("ws");

const [httpPort, mode, httpsPort, cert, key] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4]), process.argv[5], process.argv[6]];
if (mode !== "deflate" && mode !== "plain" && mode !== "cookie") {
  console.error("usage: node server.js HTTP_PORT deflate|plain|cookie [HTTPS_PORT CERT KEY]");
  process.exit(2);
}
let stats;
let httpSockets; // the connections that carried /login and /me (keep-alive: one a client)
const seen = new Set();
const reset = () => {
  stats = { connected: 0, peak: 0, tls: 0, users: 0, joins: 0, chats: 0, delivered: 0, deflated: 0, refused: 0, errors: 0,
    logins: 0, me: 0, upgrades: 0, no_cookie: 0, dup_cookie: 0, wrong_user: 0, http_conns: 0 };
  seen.clear();
  httpSockets = new WeakSet();
};
const sessions = new Map(); // sid -> {user, me}

// session is the request's session, or why it has none (its status).
const session = (req) => {
  const sids = (req.headers.cookie || "").split(";").map((p) => p.trim()).filter((p) => p.startsWith("sid=")).map((p) => p.slice(4));
  if (sids.length > 1) { stats.dup_cookie++; return { status: 400 }; }
  const s = sids.length === 1 && sessions.get(sids[0]);
  if (!s) { stats.no_cookie++; return { status: 401 }; }
  return { sid: sids[0], s };
};

const login = (req, res) => {
  let body = "";
  req.on("data", (d) => { body += d; if (body.length > 4096) req.destroy(); });
  req.on("end", () => {
    let user;
    try { user = String(JSON.parse(body).user); } catch { res.statusCode = 400; res.end(); return; }
    stats.logins++;
    if (!user.startsWith("nocookie")) {
      const sid = crypto.randomBytes(12).toString("hex");
      sessions.set(sid, { user, me: false });
      res.setHeader("set-cookie", [`sid=${sid}; Path=/; HttpOnly`, "theme=dark; Path=/"]);
    }
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ ok: true }));
  });
};
reset();
const rooms = new Map();

const handler = (req, res) => {
  if (mode === "cookie" && (req.url === "/login" || req.url === "/me") && !httpSockets.has(req.socket)) {
    httpSockets.add(req.socket);
    stats.http_conns++;
  }
  if (mode === "cookie" && req.method === "POST" && req.url === "/login") {
    login(req, res);
  } else if (mode === "cookie" && req.url === "/me") {
    const { status, s } = session(req);
    if (!s) { res.statusCode = status; res.end(); return; }
    s.me = true;
    stats.me++;
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ user: s.user }));
  } else if (req.url === "/stats") {
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
  // verifyClient: in cookie mode the upgrade takes the session (once).
  const verifyClient = (info, done) => {
    if (mode !== "cookie") return done(true);
    const { status, sid, s } = session(info.req);
    if (!s || !s.me) return done(false, s ? 401 : status);
    sessions.delete(sid);
    info.req.sessionUser = s.user;
    stats.upgrades++;
    done(true);
  };
  const wss = new WebSocketServer({ server, verifyClient, perMessageDeflate: mode === "deflate" ? { threshold: 0 } : false });
  wss.on("connection", (ws, req) => {
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
        if (req.sessionUser !== undefined && req.sessionUser !== String(m.user)) {
          stats.wrong_user++;
          ws.close(1008, "not the session's user");
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

// A client's steps keep their connection as long as a login may take (node
// closes an idle one after 5 s by default: a starved client's /me would
// come on a second).
const keep = (server) => { server.keepAliveTimeout = 60000; return server; };
serve(keep(http.createServer(handler)), false).listen(httpPort, "127.0.0.1");
if (httpsPort) {
  serve(keep(https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, handler)), true).listen(httpsPort, "127.0.0.1");
}
// The tests stop the server with SIGINT: a clean exit, as a Ctrl-C'd
// server's (node's default dies by the signal, which the test reports).
process.on("SIGINT", () => process.exit(0));
