package profile

import (
	"strings"
	"testing"
)

// TestDocsReferenceExamples: the reference fragments docs/profiles.md
// gives for a profile file's keys (framing by varint, kinds, a login,
// a heartbeat with its latency, identity with length fixing, rooms the
// server assigns, a correlation) are one profile that parses and
// compiles as written; only what a fragment names and another does not
// define is added (the server's denied, occupants and chat kinds, the client's leave). The
// file skeleton lists exactly the keys a profile file takes. The other
// examples run in their own tests (docBlock, docExampleIs).
func TestDocsReferenceExamples(t *testing.T) {
	kinds := docBlock(t, "kinds:\n  client:\n    - {name: hello")
	kinds = strings.Replace(kinds, "  server:\n", "    - {name: leave, match: {prefix: \"BYE\"}}\n  server:\n    - {name: denied, match: {prefix: \"DENIED\"}}\n    - {name: chat, match: {prefix: \"CHAT \"}}\n    - {name: occupants, match: {prefix: \"{\"}}\n", 1)
	doc := "name: acme\ntransport: websocket\nport: 9000\ndelivery: [chat]\n" + // span: websocket only; latency reads chat
		docBlock(t, "framing: {type: varint") + kinds +
		docBlock(t, "login:\n  send: [hello]") +
		docBlock(t, "heartbeat:\n  template:") +
		docBlock(t, "identity:\n  user: {kind: hello") +
		docBlock(t, "rooms:\n  assigned_by: server") +
		docBlock(t, "correlation:\n  - name: token")
	sp, err := ParseSpec("acme.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	p, err := Compile(sp)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if p.Name != "acme" {
		t.Errorf("name %q", p.Name)
	}
	// The skeleton: every key it lists is a key a profile file takes.
	var keys []string
	for _, l := range strings.Split(docBlock(t, "name: acme            # required"), "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok && k != "" && !strings.HasPrefix(k, " ") {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if _, err := ParseSpec("k.yaml", []byte("name: x\n"+k+": null\n")); err != nil && strings.Contains(err.Error(), "unknown key") {
			t.Errorf("the skeleton's key %s: %v", k, err)
		}
	}
	if len(keys) < 15 {
		t.Errorf("the skeleton lists %d keys: %v", len(keys), keys)
	}
}
