// k6's side of the fleet-vs-k6 benchmark (bench/cmd/wsvsk6, `make
// bench-fleet`): the workload the fleet replays from its recording of
// `wsroom client`, written the way a k6 user would. ROOMS × ROOM_SIZE
// virtual users, one WebSocket each to bench/cmd/wsroom
// (ws://TARGET/ws?room=r<k>&user=k6-<vu>); after the joined message each
// sends a SIZE-byte JSON text message every 1/RATE s for DURATION (N:N:
// every member sends, the server casts to the room's others), stamping
// "ts" with its clock (microseconds, of millisecond resolution), and records each delivery's
// latency in room_latency. MODE=idle: connect, wait for joined, send
// nothing, hold for DURATION (idle memory per client).
//
//   k6 run -e TARGET=127.0.0.1:7600 -e DURATION=30s bench/k6/wsroom.js
import { WebSocket } from 'k6/websockets';
import { Counter, Trend } from 'k6/metrics';

const target = __ENV.TARGET || '127.0.0.1:7600';
const rooms = parseInt(__ENV.ROOMS || '10');
const roomSize = parseInt(__ENV.ROOM_SIZE || '20');
const rate = parseFloat(__ENV.RATE || '20');
const size = parseInt(__ENV.SIZE || '200');
const durationS = parseFloat(__ENV.DURATION_S || '30');
const idle = (__ENV.MODE || 'nn') === 'idle';
const clients = parseInt(__ENV.CLIENTS || String(rooms * roomSize));

export const options = {
  scenarios: {
    room: {
      executor: 'per-vu-iterations',
      vus: clients,
      iterations: 1,
      maxDuration: `${durationS + 120}s`,
      gracefulStop: '10s',
    },
  },
  summaryTrendStats: ['avg', 'med', 'p(90)', 'p(99)', 'max'],
};

const latency = new Trend('room_latency', true);
const delivered = new Counter('room_received');
const sent = new Counter('room_sent');

// The message: {"type":"msg","ts":"<19 digits>","pad":"xxx…"}, SIZE bytes.
const head = '{"type":"msg","ts":"';
const mid = '","pad":"';
const tail = '"}';
const pad = 'x'.repeat(size - head.length - 19 - mid.length - tail.length);

// Date.now() has millisecond resolution: so have k6's latencies.
function message() {
  return head + String(Date.now() * 1000).padStart(19, '0') + mid + pad + tail;
}

export default function () {
  const vu = __VU - 1;
  const ws = new WebSocket(`ws://${target}/ws?room=r${vu % rooms}&user=k6-${vu}`);
  let joined = false;
  ws.onmessage = (e) => {
    if (!joined) {
      joined = true;
      if (!idle) {
        const t = setInterval(() => { ws.send(message()); sent.add(1); }, 1000 / rate);
        setTimeout(() => clearInterval(t), durationS * 1000);
      }
      // Stay for deliveries in flight, as the fleet's drain does.
      setTimeout(() => ws.close(), durationS * 1000 + 2000);
      return;
    }
    const i = e.data.indexOf('"ts":"');
    if (i < 0) return;
    const ts = parseInt(e.data.substring(i + 6, i + 25), 10);
    latency.add((Date.now() * 1000 - ts) / 1000);
    delivered.add(1);
  };
}
