// A node ws client session for cmd/replay's tests to record (over plain
// ws://, through the record proxy): it joins ROOM as USER, sends N chats
// 50 ms apart ({"ts":""} is where a replay puts its latency stamp), then
// closes. With deflate it offers permessage-deflate as ws does by default
// (compressing every message); without, it offers none. With cookie it
// logs in over HTTP first as a web app does (POST /login, GET /me with the
// cookies the login set) and upgrades with them.
//
//   node client.js PORT USER ROOM N [deflate|cookie]
"use strict";
const WebSocket = require("ws");

const [port, user, room, n, deflate, cookie] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5] || 20), process.argv[6] === "deflate", process.argv[6] === "cookie"];
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);

const start = async () => {
  const headers = {};
  if (cookie) {
    const base = `http://127.0.0.1:${port}`;
    const res = await fetch(`${base}/login`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ user }) });
    if (!res.ok) throw new Error(`login: ${res.status}`);
    headers.cookie = res.headers.getSetCookie().map((c) => c.split(";")[0]).join("; ");
    const me = await fetch(`${base}/me`, { headers });
    if (!me.ok) throw new Error(`me: ${me.status}`);
    await me.json();
  }
  run(new WebSocket(`ws://127.0.0.1:${port}/chat`, { headers, perMessageDeflate: deflate ? { threshold: 0 } : false }));
};

const run = (ws) => {
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
};

start().catch((err) => { console.error("error:", err.message); process.exit(1); });
