// Loaded before networked-aframe's own server (node -r ./count.js
// node_modules/networked-aframe/server/socketio-server.js), which it
// leaves as it is: it wraps the socket.io server that file creates and
// counts, per room instance the server put each socket in (the room it
// joined other than its own id's), the joins, the "broadcast" events
// the sockets sent and those the server delivered, and names the
// instance's first joiner (first: its socket id). STATS_PORT serves
// them as JSON (GET /stats), GET /reset zeroes them.
"use strict";
const Module = require("module");
const http = require("http");

let stats = { connected: 0, instances: {} };
const inst = (name) => (stats.instances[name] ||= { first: "", joins: 0, broadcasts: 0, delivered: 0, peak: 0, members: 0 });
const roomOf = (socket) => [...socket.rooms].find((r) => r !== socket.id);

function counting(io) {
  io.of("/").adapter.on("join-room", (room, id) => {
    if (room === id) return;
    const s = inst(room);
    if (s.joins === 0) s.first = id;
    s.joins++;
    s.members++;
    s.peak = Math.max(s.peak, s.members);
  });
  io.of("/").adapter.on("leave-room", (room, id) => {
    if (room !== id && stats.instances[room]) stats.instances[room].members--;
  });
  io.on("connection", (socket) => {
    stats.connected++;
    socket.on("disconnect", () => stats.connected--);
    socket.onAny((event) => {
      const r = roomOf(socket);
      if (event === "broadcast" && r) inst(r).broadcasts++;
    });
    socket.onAnyOutgoing((event) => {
      const r = roomOf(socket);
      if (event === "broadcast" && r) inst(r).delivered++;
    });
  });
  return io;
}

const load = Module._load;
Module._load = function (request, ...rest) {
  const m = load.call(this, request, ...rest);
  if (request !== "socket.io") return m;
  const wrapped = (...args) => counting(m(...args));
  return Object.assign(wrapped, m);
};

http.createServer((req, res) => {
  if (req.url === "/reset") {
    stats = { connected: stats.connected, instances: {} };
    res.end("ok");
    return;
  }
  res.setHeader("Content-Type", "application/json");
  res.end(JSON.stringify(stats));
}).listen(Number(process.env.STATS_PORT), "127.0.0.1");

// The test stops the server with SIGINT (a user's Ctrl-C): a clean exit.
process.on("SIGINT", () => process.exit(0));
