// A node ws client session for cmd/replay's tests to record (over plain
// ws://, through the record proxy): it joins ROOM as USER, sends N chats
// 50 ms apart ({"ts":""} is where a replay puts its latency stamp), then
// closes. With deflate it offers permessage-deflate as ws does by default
// (compressing every message); without, it offers none.
//
//   node client.js PORT USER ROOM N [deflate]
"use strict";
const WebSocket = require("ws");

const [port, user, room, n, deflate] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5] || 20), process.argv[6] === "deflate"];
const ws = new WebSocket(`ws://127.0.0.1:${port}/chat`, { perMessageDeflate: deflate ? { threshold: 0 } : false });
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);
ws.on("error", (err) => { console.error("error:", err.message); process.exit(1); });
ws.on("open", () => ws.send(JSON.stringify({ type: "join", user, room })));
ws.on("message", (data) => {
  const m = JSON.parse(data.toString());
  if (m.type !== "joined") return;
  let i = 0;
  const tick = setInterval(() => {
    ws.send(JSON.stringify({ type: "chat", text: `hello ${i} from ${user}`, ts: "" }));
    if (++i >= n) {
      clearInterval(tick);
      setTimeout(() => ws.close(1000), 200);
    }
  }, 50);
});
ws.on("close", () => { clearTimeout(fail); process.exit(0); });
