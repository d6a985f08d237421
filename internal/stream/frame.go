// Package stream is the channel framing of gpucloud's interactive sessions
// (exec, and what ssh and file copies build on): several byte streams and
// a few control messages multiplexed over one WebSocket, in the style of
// Kubernetes' v5.channel.k8s.io.
//
// Every binary WebSocket message is one channel byte followed by a payload
// of at most MaxPayload bytes:
//
//	0   stdin   bytes, client → process
//	1   stdout  bytes, process → client
//	2   stderr  bytes, process → client
//	3   status  JSON Status, the last message the process side sends
//	4   resize  JSON Size, client → process (a terminal's new size)
//	255 close   one byte: the channel that ends (e.g. stdin's EOF)
//
// The relay between a client and an agent parses only the channel byte
// (Decode), so that it can read the exit status and otherwise forwards
// each message as it came.
package stream

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Subprotocol is the WebSocket subprotocol a framed session negotiates.
const Subprotocol = "v1.exec.gpucloud.dev"

// The channels.
const (
	Stdin  byte = 0
	Stdout byte = 1
	Stderr byte = 2
	Status byte = 3
	Resize byte = 4
	Close  byte = 255
)

// MaxPayload bounds one message's payload: writers split larger writes,
// and readers refuse a larger message (ReadLimit).
const MaxPayload = 32 << 10

// ReadLimit is the largest message a reader accepts: the channel byte and
// a payload of MaxPayload.
const ReadLimit = MaxPayload + 1

// ExitStatus is the status channel's message: how the process ended.
// ExitCode is non-zero for a signal (128+n, as shells report it) and for
// a session the agent ended (its message says why).
type ExitStatus struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Size is the resize channel's message: a terminal's size in characters.
type Size struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// ErrFrame is returned (wrapped) for a message that breaks the framing.
var ErrFrame = errors.New("stream: bad frame")

// Message is one decoded message.
type Message struct {
	Channel byte
	// Payload aliases the message it was decoded from.
	Payload []byte
}

// IsData reports whether ch carries a byte stream (stdin, stdout, stderr).
func IsData(ch byte) bool { return ch == Stdin || ch == Stdout || ch == Stderr }

// Encode returns the message of channel ch with payload p. It does not
// check p's size: writers split first.
func Encode(ch byte, p []byte) []byte {
	b := make([]byte, 1+len(p))
	b[0] = ch
	copy(b[1:], p)
	return b
}

// Decode checks one message and splits it into its channel and payload:
// a known channel, a payload within MaxPayload, a status and a resize
// that are JSON of their types, a close naming one data channel.
func Decode(b []byte) (Message, error) {
	if len(b) == 0 {
		return Message{}, fmt.Errorf("%w: empty message", ErrFrame)
	}
	m := Message{Channel: b[0], Payload: b[1:]}
	if len(m.Payload) > MaxPayload {
		return Message{}, fmt.Errorf("%w: payload of %d bytes over %d", ErrFrame, len(m.Payload), MaxPayload)
	}
	switch m.Channel {
	case Stdin, Stdout, Stderr:
	case Status:
		if _, err := DecodeStatus(m.Payload); err != nil {
			return Message{}, err
		}
	case Resize:
		if _, err := DecodeSize(m.Payload); err != nil {
			return Message{}, err
		}
	case Close:
		if len(m.Payload) != 1 || !IsData(m.Payload[0]) {
			return Message{}, fmt.Errorf("%w: close must name one data channel", ErrFrame)
		}
	default:
		return Message{}, fmt.Errorf("%w: unknown channel %d", ErrFrame, m.Channel)
	}
	return m, nil
}

// DecodeStatus parses a status payload.
func DecodeStatus(p []byte) (ExitStatus, error) {
	var st ExitStatus
	if err := json.Unmarshal(p, &st); err != nil {
		return ExitStatus{}, fmt.Errorf("%w: status: %v", ErrFrame, err)
	}
	return st, nil
}

// DecodeSize parses a resize payload.
func DecodeSize(p []byte) (Size, error) {
	var sz Size
	if err := json.Unmarshal(p, &sz); err != nil {
		return Size{}, fmt.Errorf("%w: resize: %v", ErrFrame, err)
	}
	return sz, nil
}
