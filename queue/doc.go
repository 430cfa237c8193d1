// Package queue is the wire between Bulkhead's nodes: NATS subjects, the job
// and reply-frame codecs, JetStream stream and consumer setup, the embedded
// NATS server, cancellation, and trace-context headers.
//
// It carries data; it never decides policy (admission, quotas, scheduling) and
// never imports edge/ or workers/.
package queue
