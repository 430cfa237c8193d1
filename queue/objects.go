package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// objectChunk is the chunk size of the objects putObject writes
// (jetstream's default).
const objectChunk = 128 << 10

// putObject writes data as object name of the object store obj in
// JetStream's object store format (chunks on $O.<bucket>.C.<id>, then the
// metadata on $O.<bucket>.M.<name>, rolled up), publishing synchronously
// on js. It stands in for ObjectStore.Put, whose async publisher leaves a
// goroutine blocked forever on a nil channel when its Put ends before that
// goroutine started (nats.go v1.55.0, jetstream.resetPendingAcksOnReconnect).
// An object of that name that exists is left as it is (callers name
// objects by their content); wrote reports whether this call wrote it.
func putObject(ctx context.Context, js jetstream.JetStream, obj jetstream.ObjectStore, name string, data []byte) (wrote bool, err error) {
	info, err := obj.GetInfo(ctx, name)
	switch {
	case err == nil && !info.Deleted:
		return false, nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return false, unavailable(err)
	}
	id := rand.Text()
	chunks := fmt.Sprintf("$O.%s.C.%s", AdaptersBucket, id)
	h := sha256.New()
	sent := uint32(0)
	for off := 0; off < len(data); off += objectChunk {
		part := data[off:min(off+objectChunk, len(data))]
		h.Write(part)
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: chunks, Data: part}); err != nil {
			purgeChunks(js, chunks)
			return false, objectError(err)
		}
		sent++
	}
	meta := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: objectChunk}},
		Bucket:     AdaptersBucket, NUID: id, Size: uint64(len(data)), Chunks: sent,
		Digest: jetstream.GetObjectDigestValue(h), ModTime: time.Now().UTC(),
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return false, err
	}
	m := nats.NewMsg(fmt.Sprintf("$O.%s.M.%s", AdaptersBucket, base64.URLEncoding.EncodeToString([]byte(name))))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = b
	if _, err := js.PublishMsg(ctx, m); err != nil {
		purgeChunks(js, chunks)
		return false, objectError(err)
	}
	return true, nil
}

// objectError is a refused object write: ErrStoreFull when the store is
// full, else ErrUnavailable.
func objectError(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jsStoreFailed {
		return fmt.Errorf("%w: adapters object store: %s", ErrStoreFull, api.Description)
	}
	return unavailable(err)
}

// purgeChunks drops the chunks of an object whose writing failed (best
// effort: what remains is unreachable and counts against the store's size).
func purgeChunks(js jetstream.JetStream, subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := js.Stream(ctx, "OBJ_"+AdaptersBucket); err == nil {
		_ = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
}
