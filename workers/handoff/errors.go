package handoff

import "errors"

// Sentinel errors. Functions wrap them with %w and say which transfer, page
// and field went wrong.
var (
	// ErrManifest reports a manifest that does not match what the decode side
	// expects, is not self-consistent, or disagrees with the pages the sender
	// holds.
	ErrManifest = errors.New("handoff: manifest mismatch")
	// ErrChecksum reports a chunk whose CRC-32 or a page whose CRC-64 is not
	// the one announced.
	ErrChecksum = errors.New("handoff: checksum mismatch")
	// ErrShort reports a sender that holds fewer pages or fewer bytes than the
	// manifest names, or a chunk that brought no data.
	ErrShort = errors.New("handoff: short transfer")
	// ErrTransfer reports a transfer that could not complete: no answer within
	// the request timeout (the sender is gone), an error answer from the
	// sender, an unexpected chunk, or a broken connection.
	ErrTransfer = errors.New("handoff: transfer failed")
	// ErrAbandoned reports a sender that waited longer than its timeout for
	// the receiver's next request; the receiver is gone.
	ErrAbandoned = errors.New("handoff: receiver abandoned the transfer")
	// ErrAborted reports a receiver that gave up on the transfer and said so.
	ErrAborted = errors.New("handoff: receiver aborted the transfer")
	// ErrProtocol reports a wire message that cannot be decoded.
	ErrProtocol = errors.New("handoff: malformed message")
	// ErrConfig reports a SenderConfig or ReceiverConfig field out of range.
	ErrConfig = errors.New("handoff: invalid config")
)
