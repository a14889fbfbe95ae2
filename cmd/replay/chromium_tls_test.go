package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// chromiumPage joins the wss room chat of testdata/wschat as browser-user,
// sends 20 chats 50 ms apart (ts "" is where a replay stamps) and closes:
// a page served over https, as a WebXR page must be.
const chromiumPage = `<!doctype html><title>wss</title><script>
const ws = new WebSocket(new URLSearchParams(location.search).get("ws"));
ws.onopen = () => ws.send(JSON.stringify({type: "join", user: "browser-user", room: "lobby"}));
ws.onmessage = (e) => {
  const m = JSON.parse(e.data);
  if (m.type !== "joined") return;
  let i = 0;
  const tick = setInterval(() => {
    ws.send(JSON.stringify({type: "chat", text: "hello " + i + " from the browser", ts: ""}));
    if (++i >= 20) { clearInterval(tick); setTimeout(() => { ws.close(1000); document.title = "done"; }, 200); }
  }, 50);
};
</script>`

// spkiOf is the base64 SHA-256 of a PEM certificate's public key, as
// Chromium's --ignore-certificate-errors-spki-list takes it.
func spkiOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestChromiumWSS: headless Chromium opens an https page whose script
// talks wss:// to the node ws room chat, recorded (a) with record live and
// Chromium's own key log (the secrets go into the pcapng), (b) through
// record proxy minting certificates from record ca's CA, Chromium trusting
// that CA by its SPKI; each capture is replayed over wss:// as 20 clients
// and the server's counts equal the fleet's exactly.
func TestChromiumWSS(t *testing.T) {
	t.Parallel()
	testproc.NeedRoot(t, "record live")
	chromium := testproc.NeedTool(t, "chromium", "chromium")
	node := needTool(t, "node")
	pki := newTestPKI(t)
	plain, secure := startWSChat(t, node, "plain", &pki)
	pair, err := tls.LoadX509KeyPair(pki.cert, pki.key)
	if err != nil {
		t.Fatal(err)
	}
	page := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/html")
		fmt.Fprint(w, chromiumPage)
	}))
	page.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	page.StartTLS()
	defer page.Close()
	prof := filepath.Join(wsChatDir, "chat.yaml")

	// browse runs Chromium on the page until the server saw its session end.
	browse := func(t *testing.T, ws string, args ...string) {
		t.Helper()
		var ok string
		if err := fetchText(fmt.Sprintf("http://127.0.0.1:%d/reset", plain), &ok); err != nil {
			t.Fatal(err)
		}
		all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir()}, args...)
		cmd := exec.Command(chromium, append(all, page.URL+"/?ws="+url.QueryEscape(ws))...)
		var out testproc.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		var s wsChatStats
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/stats", plain), &s)
			if s.Chats == 20 && s.Connected == 0 {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("the browser's session did not end: server %+v\n%s", s, testproc.Tail(out.String(), 30))
			}
		}
	}
	// replayIt replays the capture's browser flow over wss:// to the
	// server's TLS port and compares the server's counts with the fleet's.
	replayIt := func(t *testing.T, capPath string) {
		t.Helper()
		insp := inspectProfile(t, prof, capPath)
		loop := suggestedLoop.FindStringSubmatch(insp)
		if loop == nil || !strings.Contains(insp, "TLS 1.3") {
			t.Fatalf("inspect:\n%s", insp)
		}
		var ok string
		if err := fetchText(fmt.Sprintf("http://127.0.0.1:%d/reset", plain), &ok); err != nil {
			t.Fatal(err)
		}
		res := replay(t, "--profile", prof, "--capture", capPath, "--target", fmt.Sprintf("wss://127.0.0.1:%d/chat", secure), "--tls-ca", pki.ca,
			"--clients", "20", "--senders", "4", "--room-size", "20", "--loop", loop[1],
			"--login-interval", "10ms", "--login-timeout", "30s", "--after-logins", "3s", "--drain-deliveries", "20s")
		mustOK(t, res)
		s, app := res.sum, wsChatSettled(t, plain)
		if s.LoginsSucceeded != 20 || s.MessagesSent == 0 || s.MessagesReceived == 0 {
			t.Fatalf("logins %d sent %d received %d\n%s%s", s.LoginsSucceeded, s.MessagesSent, s.MessagesReceived, res.stdout, res.stderr)
		}
		if app.TLS != 20 || app.Joins != 20 || app.Chats != s.MessagesSent || app.Delivered != s.MessagesReceived {
			t.Errorf("server: %d TLS connections, %d joins, %d chats, %d delivered; fleet: sent %d received %d", app.TLS, app.Joins, app.Chats, app.Delivered, s.MessagesSent, s.MessagesReceived)
		}
		t.Logf("%s: fleet sent %d received %d; server chats %d delivered %d", filepath.Base(capPath), s.MessagesSent, s.MessagesReceived, app.Chats, app.Delivered)
	}
	serverSPKI := spkiOf(t, pki.cert)

	t.Run("record live with the key log", func(t *testing.T) {
		dir := t.TempDir()
		keyLog, out := filepath.Join(dir, "chromium.keys"), filepath.Join(dir, "live.pcapng")
		rec := testproc.StartCombined(t, bins["record"], "live", "--iface", "lo", "--port", strconv.Itoa(secure), "--proto", "tcp", "--out", out, "--tls-keylog", keyLog)
		waitOutput(t, rec, "capturing on lo")
		browse(t, fmt.Sprintf("wss://127.0.0.1:%d/chat", secure), "--ssl-key-log-file="+keyLog, "--ignore-certificate-errors-spki-list="+serverSPKI)
		time.Sleep(200 * time.Millisecond)
		if err := rec.Stop(os.Interrupt, 10*time.Second); err != nil || !strings.Contains(rec.Stdout.String(), "added the TLS secrets") {
			t.Fatalf("record live: %v\n%s", err, rec.Stdout.String())
		}
		replayIt(t, out)
	})

	t.Run("record proxy with its CA", func(t *testing.T) {
		dir := t.TempDir()
		caCert, caKey, out := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "proxy.pcapng")
		if b, err := exec.Command(bins["record"], "ca", "--cert", caCert, "--key", caKey).CombinedOutput(); err != nil {
			t.Fatalf("record ca: %v\n%s", err, b)
		}
		rec := testproc.StartCombined(t, bins["record"], "proxy", "--listen", "127.0.0.1:0", "--upstream", fmt.Sprintf("127.0.0.1:%d", secure),
			"--ca-cert", caCert, "--ca-key", caKey, "--upstream-tls", "--tls-ca", pki.ca, "--out", out)
		listen := proxyAddr(t, rec, rec.Stdout)
		browse(t, "wss://"+listen+"/chat", "--ignore-certificate-errors-spki-list="+serverSPKI+","+spkiOf(t, caCert))
		if err := rec.Stop(os.Interrupt, 10*time.Second); err != nil || strings.Contains(rec.Stdout.String(), "handshakes failed") {
			t.Fatalf("record proxy: %v\n%s", err, rec.Stdout.String())
		}
		replayIt(t, out)
	})
}

// waitOutput waits for s in a process's output.
func waitOutput(t *testing.T, p *testproc.Proc, s string) {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); !strings.Contains(p.Stdout.String(), s); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) || p.Exited() {
			t.Fatalf("no %q from %s:\n%s", s, p.Cmd.Path, p.Stdout.String())
		}
	}
}
