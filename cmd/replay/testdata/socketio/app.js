// A socket.io 4.x room app for cmd/replay's real-server tests, using only
// the library's documented API. A client sends its user id in the
// handshake's auth ({user}); ids starting with "banned" are refused with
// connect_error "not authorized". "join" (with an ack) puts the socket in
// a room; "chat" goes to the room's other sockets. GET /stats answers the
// app's own counters; GET /reset zeroes them.
//
//   node app.js PORT [PING_INTERVAL_MS PING_TIMEOUT_MS]
"use strict";
const http = require("http");
const { Server } = require("socket.io");

const port = Number(process.argv[2]);
const pingInterval = Number(process.argv[3] || 25000);
const pingTimeout = Number(process.argv[4] || 20000);

let stats;
function reset() {
  stats = { connected: 0, peak: 0, users: new Set(), joins: 0, chats: 0, delivered: 0, refused: {}, disconnects: {} };
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

const io = new Server(srv, { pingInterval, pingTimeout, transports: ["websocket"], serveClient: false });

io.use((socket, next) => {
  const user = socket.handshake.auth && socket.handshake.auth.user;
  if (typeof user !== "string" || user === "" || user.startsWith("banned")) {
    stats.refused["not authorized"] = (stats.refused["not authorized"] || 0) + 1;
    next(new Error("not authorized"));
    return;
  }
  next();
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
    if (typeof ack === "function") ack({ ok: true, room: r });
  });
  socket.on("chat", (msg) => {
    stats.chats++;
    if (room === null) return;
    const members = io.sockets.adapter.rooms.get(room);
    stats.delivered += members ? members.size - 1 : 0;
    socket.to(room).emit("chat", msg);
  });
  socket.on("disconnect", (reason) => {
    stats.connected--;
    stats.disconnects[reason] = (stats.disconnects[reason] || 0) + 1;
  });
});

srv.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
