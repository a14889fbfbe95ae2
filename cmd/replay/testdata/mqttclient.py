# A real MQTT client session for TestMQTTMosquitto: paho-mqtt (Debian's
# python3-paho-mqtt) connects with a client id, subscribes to the room's
# topic, publishes N messages 50 ms apart (16+ bytes: room for the fleet's
# latency stamp), and disconnects.
#   python3 mqttclient.py PORT tcp|websockets N [USER PASSWORD [v5]]
# With $MQTT_TLS_CA (a PEM file) it connects over TLS, verifying the
# server with that CA, and offers ALPN "mqtt".
# With $MQTT_LOBBY (a URL) it first asks that lobby where to play, as a
# game client asks its matchmaker: GET, a JSON answer {"game": {"port": N}}
# (the broker is on the lobby's host) or {"game": {"addr": "HOST:PORT"}};
# PORT is then not used.
import os, sys, time
import paho.mqtt.client as mqtt

port, transport, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
host = "127.0.0.1"
if os.environ.get("MQTT_LOBBY"):
    import json, urllib.parse, urllib.request
    lobby = os.environ["MQTT_LOBBY"]
    with urllib.request.urlopen(lobby, timeout=10) as r:
        game = json.load(r)["game"]
    if "addr" in game:
        host, p = game["addr"].rsplit(":", 1)
        port = int(p)
    else:
        host, port = urllib.parse.urlsplit(lobby).hostname, int(game["port"])
version = mqtt.MQTTv5 if len(sys.argv) > 6 and sys.argv[6] == "v5" else mqtt.MQTTv311
c = mqtt.Client(client_id="rec-client-01", transport=transport, protocol=version)
if len(sys.argv) > 5:
    c.username_pw_set(sys.argv[4], sys.argv[5])
if os.environ.get("MQTT_TLS_CA"):
    import ssl
    ctx = ssl.create_default_context(cafile=os.environ["MQTT_TLS_CA"])
    ctx.set_alpn_protocols(["mqtt"])
    c.tls_set_context(ctx)
got = []
c.on_message = lambda cl, u, m, *props: got.append(m.payload)
c.connect(host, port, keepalive=60)
c.loop_start()
time.sleep(0.2)
c.subscribe("rooms/lobby", qos=0)
time.sleep(0.2)
for i in range(n):
    c.publish("rooms/lobby", b"pose %04d ........" % i, qos=0)
    time.sleep(0.05)
time.sleep(0.3)
c.disconnect()
c.loop_stop()
print("received", len(got))
