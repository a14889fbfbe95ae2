package relay

import (
	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Reasons as types (after internal/report's Reason and nats-server's
// ClosedState): one type per family, whose String is the metric label, the
// error code's name in the error frame the client gets, and the log's
// word alike. A reason that sends the client an error is its error code;
// the others are named here.

// CloseReason is why a TCP connection or UDP session ended
// (relay_disconnects_total).
type CloseReason int32

// Ends that send the client no error frame (a connection cut for the
// memory budget was not reading). Every other CloseReason is an
// error code (closeFor).
const (
	CloseClosed       CloseReason = -1 - iota // the client closed or reset the connection
	CloseLeave                                // a UDP session ended by leave
	CloseUnconfirmed                          // a UDP session whose client never sent back its token
	CloseMemoryBudget                         // cut for the memory budget: among the connections holding the most queued bytes
)

// closeFor is the reason of an end the client is told with code.
func closeFor(code wire.ErrorCode) CloseReason { return CloseReason(code) }

// Code is the error code the client is sent for r, or 0 for none.
func (r CloseReason) Code() wire.ErrorCode {
	if r > 0 {
		return wire.ErrorCode(r)
	}
	return 0
}

// String is the reason's label: its error code's name, or closed, leave,
// unconfirmed.
func (r CloseReason) String() string {
	switch r {
	case CloseClosed:
		return metrics.ReasonClosed
	case CloseLeave:
		return metrics.ReasonLeave
	case CloseUnconfirmed:
		return metrics.ReasonUnconfirmed
	case CloseMemoryBudget:
		return metrics.ReasonMemoryBudget
	}
	return r.Code().String()
}

// RejectReason is why a frame or datagram was refused or dropped
// (relay_rejected_frames_total): the error code it was answered with, or,
// for UDP datagrams dropped unanswered, one named here.
type RejectReason int32

// Datagrams dropped without a reply. Every other RejectReason is an error
// code (rejectFor).
const (
	RejectGarbage        RejectReason = -1 - iota // not a token and one whole frame
	RejectUnknownSession                          // a token of no live session
	RejectWrongSource                             // a live session's token from another address
)

// rejectFor is the reason of a refusal answered with code.
func rejectFor(code wire.ErrorCode) RejectReason { return RejectReason(code) }

// String is the reason's label.
func (r RejectReason) String() string {
	switch r {
	case RejectGarbage:
		return metrics.ReasonGarbage
	case RejectUnknownSession:
		return metrics.ReasonUnknownSession
	case RejectWrongSource:
		return metrics.ReasonWrongSource
	}
	return wire.ErrorCode(r).String()
}

// UndeliveredReason is why a frame for a client was not sent
// (relay_undelivered_frames_total).
type UndeliveredReason int32

// Undelivered reasons.
const (
	UndeliveredUnconfirmed      UndeliveredReason = iota // to a UDP session not confirmed yet
	UndeliveredDatagramTooLarge                          // over the largest UDP datagram
)

// String is the reason's label.
func (r UndeliveredReason) String() string {
	if r == UndeliveredDatagramTooLarge {
		return metrics.ReasonDatagramTooLarge
	}
	return metrics.ReasonUnconfirmed
}

// reject counts a refused frame or datagram.
func (s *Server) reject(r RejectReason) { s.m.Rejected(r.String()) }

// disconnected counts an ended connection or session.
func (s *Server) disconnected(r CloseReason) { s.m.Disconnect(r.String()) }
