// A Colyseus 0.16 room server for cmd/replay's tests: rooms "chat" of at
// most 50 clients (matchmaking over HTTP, then the WebSocket transport);
// a "chat" message is broadcast to the room's others as "msg" and counts
// in the room's schema state, so every patch interval sends a patch to
// every joined client. Only the library's documented API, plus a count of
// the patches sent. GET /stats answers the counters (byRoom: the joins,
// messages and deliveries of each room, by its roomId), GET /reset
// zeroes them.
//
//   node server.js PORT
"use strict";
const http = require("http");
const { Server, Room, ClientState } = require("@colyseus/core");
const { WebSocketTransport } = require("@colyseus/ws-transport");
const { Schema, defineTypes } = require("@colyseus/schema");

const port = Number(process.argv[2]);
let stats;
const reset = () => { stats = { rooms: 0, connected: 0, peak: 0, joins: 0, leaves: 0, messages: 0, delivered: 0, patches: 0, patchesSent: 0, byRoom: {} }; };
const roomStats = (room) => (stats.byRoom[room.roomId] ||= { joins: 0, messages: 0, delivered: 0 });
reset();

class State extends Schema {
  constructor() { super(); this.count = 0; }
}
defineTypes(State, { count: "number" });

class ChatRoom extends Room {
  onCreate() {
    stats.rooms++;
    this.maxClients = 50;
    this.setState(new State());
    this.onMessage("chat", (client, msg) => {
      stats.messages++;
      this.state.count++;
      const others = this.clients.filter((c) => c !== client).length;
      stats.delivered += others;
      roomStats(this).messages++;
      roomStats(this).delivered += others;
      this.broadcast("msg", msg, { except: client });
    });
  }
  onJoin() {
    stats.joins++;
    roomStats(this).joins++;
    stats.connected++;
    stats.peak = Math.max(stats.peak, stats.connected);
  }
  onLeave() { stats.leaves++; stats.connected--; }
  broadcastPatch() {
    const joined = this.clients.filter((c) => c.state === ClientState.JOINED).length;
    const changed = super.broadcastPatch();
    if (changed && joined > 0) { stats.patches++; stats.patchesSent += joined; }
    return changed;
  }
}

const server = http.createServer();
server.on("request", (req, res) => {
  if (req.url === "/stats") {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify(stats));
  } else if (req.url === "/reset") {
    reset();
    res.end("ok");
  }
});
const gameServer = new Server({ transport: new WebSocketTransport({ server }), greet: false });
gameServer.define("chat", ChatRoom);
gameServer.listen(port, "127.0.0.1");
process.on("SIGINT", () => process.exit(0));
