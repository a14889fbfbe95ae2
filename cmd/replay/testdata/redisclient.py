# A Redis pub/sub session for TestRedisPubSub, speaking RESP3 over a plain
# socket (redis-cli stops reading its input after SUBSCRIBE, and a RESP2
# connection cannot PUBLISH once subscribed): HELLO 3, SUBSCRIBE to the
# room's channel, N PUBLISH 50 ms apart (payloads of 16+ bytes: room for
# the fleet's latency stamp), QUIT.
#   python3 redisclient.py PORT N
import socket, sys, threading, time

port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))

def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    s.sendall(out)

def drain():
    while s.recv(65536):
        pass

threading.Thread(target=drain, daemon=True).start()
cmd(b"HELLO", b"3")
time.sleep(0.1)
cmd(b"SUBSCRIBE", b"lobby")
time.sleep(0.1)
for i in range(n):
    cmd(b"PUBLISH", b"lobby", b"pose %04d ........" % i)
    time.sleep(0.05)
time.sleep(0.2)
cmd(b"QUIT")
time.sleep(0.2)
