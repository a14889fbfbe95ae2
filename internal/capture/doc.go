// Package capture turns recorded sessions into timestamped payloads, cut
// into a protocol's frames by that protocol's Framer, and records new
// ones.
//
// Reading: pcap and pcapng files (Ethernet, Linux cooked v1/v2, BSD
// loopback, raw IP; IPv4/IPv6; VLAN tags), with our own bounds in front of
// gopacket's readers so a hostile file gives a clear error instead of a huge
// allocation or a hang. TCP is reassembled per direction (retransmissions,
// reordering, overlap, a capture that starts mid-connection); each
// direction's bytes go in stream order, with gaps marked, to the
// protocol's Framer (Options.Framer, from internal/profile), which cuts
// them into frames and realigns after a gap, and each datagram to it
// whole. Without a Framer the payloads are kept as they came, one frame
// per packet, for a profile to cut later. The package knows no protocol:
// which side of a flow is the client is told by its SYN, else by what the
// Framer's Hints say of the frames, else by the server port. Read for a
// summary (Options.Summarize), each frame
// goes to a Summarizer's Tally instead of being kept: what a summary
// shows of them (kinds, joins, users, rooms) is the profile's inspection
// (internal/profile), not this package's.
//
// TLS: a TCP connection that opens with a ClientHello is read as TLS. Its
// hellos give the flow's TLSInfo (version, SNI, ALPN, cipher); with the
// connection's secrets (Options.KeyLog, or a pcapng decryption secrets
// block in the file) its records are decrypted (TLS 1.3, and TLS 1.2 AEAD
// suites; standard library and x/crypto AEADs) and the application data
// becomes the flow's bytes, as a plaintext connection's would. Without
// them the flow holds no frames and Capture.Undecrypted names it. The
// recording proxy can terminate TLS itself (ProxyTLS, with a CA that
// mints a certificate per server name) and notes each TLS connection on
// its SYN as a pcapng comment.
//
// Writing: a pcap/pcapng Writer that synthesizes Ethernet/IP/TCP or UDP
// headers for traffic seen at the socket level (the recording proxy), and a
// raw Writer for live libpcap captures.
//
// It is not a general packet analyser: anything that is not TCP or UDP is
// counted and left out. Which options read a capture for a protocol, and
// turning flows into a replay script (cutting messages, id rewriting),
// belong to internal/profile (its loader, profile.Load); the pacing to
// internal/session.
package capture
