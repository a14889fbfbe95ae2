// A socket.io 4.x room app for cmd/replay's real-server tests, using only
// the library's documented API. A client sends its user id in the
// handshake's auth ({user}); ids starting with "banned" are refused with
// connect_error "not authorized". "join" (with an ack naming the room's
// other sockets by id: {ok, room, peers}) puts the socket in a room;
// "chat" goes to the room's other sockets; "dm" ({to: a socket id, ...})
// goes to that one socket, through the room of its id every socket is
// in, and is counted by sender and receiver user ("a>b"), or, when no
// socket has that id, as departed (by the reason its socket went: a
// message that crossed its recipient's leave) or unknown (an id this app
// never issued: a wrong mapping). A client's engine transport when it
// joined is counted (transports: websocket, or polling for one that has
// not upgraded yet), its upgrades, and the requests Engine.IO refused.
// GET /stats answers the app's own counters;
// GET /reset zeroes them.
//
// With msgpack the packets are socket.io-msgpack-parser's (binary
// frames; Engine.IO's own packets stay text).
//
//   node app.js PORT [PING_INTERVAL_MS PING_TIMEOUT_MS [msgpack]]
"use strict";
const http = require("http");
const { Server } = require("socket.io");

const port = Number(process.argv[2]);
const pingInterval = Number(process.argv[3] || 25000);
const pingTimeout = Number(process.argv[4] || 20000);
const parser = process.argv[5] === "msgpack" ? { parser: require("socket.io-msgpack-parser") } : {};

let stats;
// The ids of sockets gone since the last reset, with why: bounded by the
// connections a test makes.
const departed = new Map();
function reset() {
  departed.clear();
  stats = { connected: 0, peak: 0, users: new Set(), joins: 0, chats: 0, delivered: 0, refused: {}, disconnects: {},
    dms: 0, dmDelivered: 0, dmUnknown: 0, dmDeparted: {}, dmPairs: {}, transports: {}, upgrades: 0, engineErrors: {} };
}
reset();

const srv = http.createServer((req, res) => {
  if (req.url === "/stats") {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify({ ...stats, users: stats.users.size }));
    return;
  }
  if (req.url === "/reset") {
    reset();
    res.end("ok\n");
    return;
  }
  res.statusCode = 404;
  res.end();
});

// Both transports, as socket.io's default: a client may poll first and
// upgrade (counted by the transport it ended on) or open a WebSocket.
const io = new Server(srv, { pingInterval, pingTimeout, serveClient: false, ...parser });

io.use((socket, next) => {
  const user = socket.handshake.auth && socket.handshake.auth.user;
  if (typeof user !== "string" || user === "" || user.startsWith("banned")) {
    stats.refused["not authorized"] = (stats.refused["not authorized"] || 0) + 1;
    next(new Error("not authorized"));
    return;
  }
  next();
});

io.engine.on("connection", (conn) => {
  conn.on("upgrade", () => { stats.upgrades++; });
});
// Requests Engine.IO refused (an unknown sid, a bad upgrade), by message.
io.engine.on("connection_error", (err) => {
  stats.engineErrors[err.message] = (stats.engineErrors[err.message] || 0) + 1;
});

io.on("connection", (socket) => {
  stats.users.add(socket.handshake.auth.user);
  stats.connected++;
  stats.peak = Math.max(stats.peak, stats.connected);
  let room = null;
  socket.on("join", (r, ack) => {
    if (typeof r !== "string") return;
    room = r;
    socket.join(r);
    stats.joins++;
    const tr = socket.conn.transport.name;
    stats.transports[tr] = (stats.transports[tr] || 0) + 1;
    const peers = [...(io.sockets.adapter.rooms.get(r) || [])].filter((id) => id !== socket.id);
    if (typeof ack === "function") ack({ ok: true, room: r, peers });
  });
  socket.on("dm", (msg) => {
    stats.dms++;
    const target = msg && typeof msg.to === "string" ? io.sockets.sockets.get(msg.to) : undefined;
    if (target === undefined) {
      const gone = typeof msg.to === "string" ? departed.get(msg.to) : undefined;
      if (gone === undefined) stats.dmUnknown++;
      else stats.dmDeparted[gone] = (stats.dmDeparted[gone] || 0) + 1;
      return;
    }
    stats.dmDelivered++;
    const pair = `${socket.handshake.auth.user}>${target.handshake.auth.user}`;
    stats.dmPairs[pair] = (stats.dmPairs[pair] || 0) + 1;
    io.to(msg.to).emit("dm", msg);
  });
  socket.on("chat", (msg) => {
    stats.chats++;
    if (room === null) return;
    const members = io.sockets.adapter.rooms.get(room);
    stats.delivered += members ? members.size - 1 : 0;
    socket.to(room).emit("chat", msg);
  });
  socket.on("disconnect", (reason) => {
    departed.set(socket.id, reason);
    stats.connected--;
    stats.disconnects[reason] = (stats.disconnects[reason] || 0) + 1;
  });
});

srv.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
