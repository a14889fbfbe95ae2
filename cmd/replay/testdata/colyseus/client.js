// A colyseus.js 0.16 client session for cmd/replay's tests to record:
// joinOrCreate("chat") (a seat over HTTP, then the WebSocket with it), N
// "chat" messages 50 ms apart ({text, ts}: ts is 19 digits where a replay
// puts its latency stamp), then leave.
//
//   node client.js PORT USER N
"use strict";
const { Client } = require("colyseus.js");

const [port, user, n] = [process.argv[2], process.argv[3], Number(process.argv[4] || 20)];
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);
(async () => {
  const client = new Client(`ws://127.0.0.1:${port}`);
  const room = await client.joinOrCreate("chat", { user });
  room.onMessage("msg", () => {});
  let i = 0;
  const tick = setInterval(() => {
    room.send("chat", { text: `hello ${i} from ${user}`, ts: "0000000000000000000" });
    if (++i >= n) {
      clearInterval(tick);
      setTimeout(async () => { await room.leave(); clearTimeout(fail); process.exit(0); }, 300);
    }
  }, 50);
})().catch((err) => { console.error("error:", err.message || err); process.exit(1); });
