// A socket.io-client session for cmd/replay's tests to record: connect
// over WebSocket with {user} in the handshake's auth, join ROOM (with an
// ack), send N chat events 50 ms apart ({text, ts: ""}: ts is where a
// replay puts its latency stamp), then disconnect.
//
//   node client.js PORT USER ROOM N
"use strict";
const { io } = require("socket.io-client");

const [port, user, room, n] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5] || 20)];
const socket = io(`http://127.0.0.1:${port}`, { transports: ["websocket"], auth: { user }, reconnection: false });
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);

socket.on("connect_error", (err) => { console.error("connect_error:", err.message); process.exit(1); });
socket.on("connect", () => {
  socket.emit("join", room, () => {
    let i = 0;
    const tick = setInterval(() => {
      socket.emit("chat", { text: `hello ${i} from ${user}`, ts: "" });
      if (++i >= n) {
        clearInterval(tick);
        setTimeout(() => socket.disconnect(), 200);
      }
    }, 50);
  });
});
socket.on("disconnect", () => { clearTimeout(fail); process.exit(0); });
