// Package session is the pacing of a replay, whatever its protocol: a
// recorded script's Timeline (when each message is due since the login,
// which ones form the login, the loop [A, B) repeated with its recorded
// timing scaled by a speed), the loop points of --loop, and the Plan each
// client plays from it (a sender's, a listener's, heartbeats after).
//
// The schedule (Plan.Step, Plan.DueBy) is a pure function of a step number
// or of elapsed time, so it is tested with tables and no sleeps. This
// package reads no files, opens no sockets and knows no protocol: a
// profile (internal/profile) cuts and rewrites the messages, the fleet
// (internal/fleet) sends them.
package session
