// A networked-aframe client for cmd/replay's tests to record: NAF's own
// socket.io adapter (src/adapters/naf-socketio-adapter.js, as the
// package ships it) run in node with the few browser globals it reads,
// joining ROOM and broadcasting N entity updates ("u", the sync data
// networked.js's createSyncData builds) 50 ms apart, then closing. The
// updates have no spare field for a latency stamp: a replay adds one
// (latency.add). socket.io-client is told to use the WebSocket
// transport only (as a page can, io(url, {transports: ["websocket"]})),
// so that the recorded socket carries the join: over the default
// transports the adapter's joinRoom goes out on a polling POST before
// the upgrade.
//
//   node client.js WS_PORT HTTP_PORT ROOM N
"use strict";
const { io } = require("socket.io-client");

const [wsPort, httpPort, room, n] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5] || 20)];
const fail = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);

global.io = (url) => io(url, { transports: ["websocket"], reconnection: false });
global.NAF = { log: { write() {}, warn() {}, error() {} }, clientId: "", entities: { entities: {} } };
// updateTimeOffset HEADs the page's own address for the server's Date.
global.document = { location: { href: `http://127.0.0.1:${httpPort}/`, protocol: "http:", host: `127.0.0.1:${httpPort}` } };

const SocketioAdapter = require("networked-aframe/src/adapters/naf-socketio-adapter.js");
const adapter = new SocketioAdapter();
adapter.setServerUrl(`ws://127.0.0.1:${wsPort}`);
adapter.setRoom(room);
adapter.setRoomOccupantListener(() => {});
adapter.setDataChannelListeners(() => {}, () => {}, () => {});
adapter.setServerConnectListeners((id) => {
  let i = 0;
  const tick = setInterval(() => {
    adapter.broadcastDataGuaranteed("u", {
      networkId: "naf-avatar-1", owner: id, creator: id, lastOwnerTime: 1, template: "#avatar-template",
      persistent: false, parent: null, isFirstSync: false,
      components: { 0: { x: i / 10, y: 1.6, z: 0 }, 1: { x: 0, y: i, z: 0 } },
    });
    if (++i >= n) {
      clearInterval(tick);
      setTimeout(() => { adapter.socket.disconnect(); clearTimeout(fail); process.exit(0); }, 200);
    }
  }, 50);
}, (err) => { console.error("connect failed:", err); process.exit(1); });
adapter.connect();
process.on("SIGINT", () => process.exit(0));
