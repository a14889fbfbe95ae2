// A socket.io-client session for cmd/replay's tests to record: connect
// over WebSocket with {user} in the handshake's auth, join ROOM (with an
// ack), send N chat events 50 ms apart ({text, ts: ""}: ts is where a
// replay puts its latency stamp), then disconnect. With DM, from the
// N/2-th chat on each chat is followed by a "dm" to the first peer the
// join's ack named ({to: its socket id, text, ts: ""}). With polling it
// connects with socket.io's default transports: the Engine.IO polling
// handshake, then the upgrade to WebSocket, which it waits for before
// it joins (so that the recorded socket carries the session). With N 0
// it joins and stays, a peer for another client to address, until
// killed.
//
// With msgpack it speaks socket.io-msgpack-parser's packets (the app's
// with msgpack), over WebSocket only.
//
//   node client.js PORT USER ROOM N [dm|polling|msgpack]
"use strict";
const { io } = require("socket.io-client");

const [port, user, room, n, mode] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5] || 20), process.argv[6]];
const transports = mode === "polling" ? ["polling", "websocket"] : ["websocket"];
const parser = mode === "msgpack" ? { parser: require("socket.io-msgpack-parser") } : {};
const socket = io(`http://127.0.0.1:${port}`, { transports, auth: { user }, reconnection: false, ...parser });
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);

socket.on("connect_error", (err) => { console.error("connect_error:", err.message); process.exit(1); });
socket.on("connect", () => {
  if (socket.io.engine.transport.name === "websocket") {
    start();
  } else {
    socket.io.engine.once("upgrade", start);
  }
});

function start() {
  socket.emit("join", room, (ack) => {
    if (n === 0) {
      clearTimeout(fail);
      console.log(`joined ${room} as ${socket.id}`);
      return;
    }
    const peer = mode === "dm" && ack && ack.peers && ack.peers[0];
    if (mode === "dm" && !peer) { console.error("dm: the join's ack names no peer"); process.exit(1); }
    let i = 0;
    const tick = setInterval(() => {
      socket.emit("chat", { text: `hello ${i} from ${user}`, ts: "" });
      if (peer && i >= n / 2) socket.emit("dm", { to: peer, text: `psst ${i} from ${user}`, ts: "" });
      if (++i >= n) {
        clearInterval(tick);
        setTimeout(() => socket.disconnect(), 200);
      }
    }, 50);
  });
}
socket.on("disconnect", () => { clearTimeout(fail); process.exit(0); });
process.on("SIGINT", () => process.exit(0));
