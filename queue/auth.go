package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ErrCredentials reports NATS credentials that cannot be created or read.
var ErrCredentials = errors.New("queue: NATS credentials")

// HandoffPrefix is the subject prefix of KV page transfers between workers
// (workers/handoff.Subject); only workers publish and subscribe below it.
const HandoffPrefix = "bulkhead.handoff."

// Roles of the connections to the bus. Each has its own nkey and the
// subject permissions RolePermissions lists, nothing more.
const (
	// RoleEdge publishes jobs, their doorbells and cancels, reads reply frames, reads and
	// writes job records and follows them to their end, and follows worker
	// capacity.
	RoleEdge = "edge"
	// RoleWorker consumes jobs (hearing their doorbells) and hand-overs, publishes reply frames,
	// hand-overs and usage events, writes job records and its capacity, and
	// serves KV page transfers to other workers.
	RoleWorker = "worker"
	// RoleBilling consumes usage events and publishes them, counted, on the
	// export stream; nothing else.
	RoleBilling = "billing"
	// RoleExport reads the export stream (counted usage events as
	// CloudEvents) with its own durable consumers: `bulkhead usage-export`.
	// It reads nothing else and publishes nothing.
	RoleExport = "export"
	// RoleOperator inspects the streams, buckets and consumers (their
	// configuration and counts, never a message) and asks the fleet for
	// its status: what `bulkhead status` does. It changes nothing.
	RoleOperator = "operator"
	// RoleSetup creates and updates the streams and buckets. Only the NATS
	// node holds it: its credentials are made afresh at each start and
	// never written anywhere (Auth.Credentials(RoleSetup)).
	RoleSetup = "setup"
)

// Roles lists every role, in the order the documentation shows them.
func Roles() []string {
	return []string{RoleEdge, RoleWorker, RoleBilling, RoleExport, RoleOperator}
}

// Credentials are one role's NATS identity: an nkey user whose seed signs
// the server's connect challenge. Its connections use a private inbox prefix
// (InboxPrefix), so no other role can subscribe to its responses.
type Credentials struct {
	Role string // empty when read from a seed file alone
	kp   nkeys.KeyPair
	pub  string
}

// NewCredentials generates a fresh nkey user for role.
func NewCredentials(role string) (*Credentials, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	return credentialsOf(role, kp)
}

func credentialsOf(role string, kp nkeys.KeyPair) (*Credentials, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	return &Credentials{Role: role, kp: kp, pub: pub}, nil
}

// ParseCredentials reads an nkey user seed (the "SU..." line nk and nsc
// write; other lines and comments are ignored).
func ParseCredentials(role string, b []byte) (*Credentials, error) {
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "SU") {
			continue
		}
		kp, err := nkeys.FromSeed([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
		}
		return credentialsOf(role, kp)
	}
	return nil, fmt.Errorf("%w: no nkey user seed (a line starting SU)", ErrCredentials)
}

// LoadCredentials reads a seed file written by WriteFile (or nk -gen user).
// A file others may read is refused: the seed is a secret.
func LoadCredentials(path string) (*Credentials, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v); chmod 600 it", ErrCredentials, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	c, err := ParseCredentials(strings.TrimSuffix(filepath.Base(path), ".nk"), b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return c, nil
}

// PublicKey is the nkey user's public key, which the server lists.
func (c *Credentials) PublicKey() string { return c.pub }

// InboxPrefix is the inbox prefix of this identity's connections: only it
// may subscribe below it.
func (c *Credentials) InboxPrefix() string { return InboxPrefix(c.pub) }

// InboxPrefix is the inbox prefix of connections authenticated as the nkey
// user pub.
func InboxPrefix(pub string) string { return "_INBOX_" + pub }

// Options are the connect options that authenticate as these credentials
// and use their private inbox prefix.
func (c *Credentials) Options() []nats.Option {
	return []nats.Option{nats.Nkey(c.pub, c.kp.Sign), nats.CustomInboxPrefix(c.InboxPrefix())}
}

// WriteFile writes the seed to path with mode 0600.
func (c *Credentials) WriteFile(path string) error {
	seed, err := c.kp.Seed()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	body := fmt.Sprintf("# Bulkhead NATS credentials for the %s role (nkey user %s). Secret: keep it 0600.\n%s\n", c.Role, c.pub, seed)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	return nil
}

// Auth is the set of credentials a NATS server accepts: one nkey user per
// role, each with RolePermissions, and one per tenant that takes its
// events on the bus (events.go), with TenantPermissions.
type Auth struct {
	creds   map[string]*Credentials // by role; read-only after construction
	tenants map[string]*Credentials // by tenant; read-only after construction
}

// NewAuth generates credentials for every role.
func NewAuth() (*Auth, error) {
	a := &Auth{creds: map[string]*Credentials{}}
	for _, role := range Roles() {
		c, err := NewCredentials(role)
		if err != nil {
			return nil, err
		}
		a.creds[role] = c
	}
	return a, a.addSetup()
}

// addSetup gives a the setup role's credentials, new ones, in memory only.
func (a *Auth) addSetup() error {
	c, err := NewCredentials(RoleSetup)
	if err != nil {
		return err
	}
	a.creds[RoleSetup] = c
	return nil
}

// CredsFile is the file name of role's seed in an auth directory.
func CredsFile(role string) string { return role + ".nk" }

// LoadOrCreateAuth reads every role's seed from dir (CredsFile), generating
// and writing (0600, in a 0700 directory) those that are missing, so the
// other nodes can be given their role's file; and every tenant's seed in
// dir/TenantCredsDir (LoadOrCreateTenantCreds writes them).
func LoadOrCreateAuth(dir string) (*Auth, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	a := &Auth{creds: map[string]*Credentials{}}
	for _, role := range Roles() {
		path := filepath.Join(dir, CredsFile(role))
		c, err := LoadCredentials(path)
		if errors.Is(err, os.ErrNotExist) {
			if c, err = NewCredentials(role); err == nil {
				err = c.WriteFile(path)
			}
		}
		if err != nil {
			return nil, err
		}
		c.Role = role
		a.creds[role] = c
	}
	tenants, err := loadTenants(dir)
	if err != nil {
		return nil, err
	}
	a.tenants = tenants
	return a, a.addSetup()
}

// Credentials returns role's credentials; nil for an unknown role.
func (a *Auth) Credentials(role string) *Credentials { return a.creds[role] }

func (a *Auth) nkeyUsers() []*server.NkeyUser {
	var users []*server.NkeyUser
	for _, role := range append(Roles(), RoleSetup) {
		c := a.creds[role]
		users = append(users, &server.NkeyUser{Nkey: c.pub, Permissions: RolePermissions(role, c.pub)})
	}
	for tenant, c := range a.tenants {
		users = append(users, &server.NkeyUser{Nkey: c.pub, Permissions: TenantPermissions(tenant, c.pub)})
	}
	return users
}

// streamsAll are the streams every role may look up (configuration and
// state only; STREAM.INFO carries no message).
func streamsAll() []string {
	return []string{JobsStream, DecodeStream, UsageStream, ExportStream, NotifyStream, "KV_" + ResultsBucket, "KV_" + CapacityBucket,
		"KV_" + FinetunesBucket, "OBJ_" + AdaptersBucket}
}

// consumeOn is what consuming from stream takes: creating and looking up
// its durable or ordered consumers, pulling, acknowledging and answering
// flow control.
func consumeOn(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>", "$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>", "$JS.FC." + stream + ".>",
	}
}

// kvReadWrite is what reading and writing bucket's keys takes.
func kvReadWrite(bucket string) []string {
	return []string{
		"$KV." + bucket + ".>",
		"$JS.API.DIRECT.GET.KV_" + bucket, "$JS.API.DIRECT.GET.KV_" + bucket + ".>",
		"$JS.API.STREAM.MSG.GET.KV_" + bucket,
	}
}

// adaptersRead is what reading the adapters object store's files takes:
// an object's metadata (direct or message get) and its chunks (an ordered
// consumer).
func adaptersRead() []string {
	stream := "OBJ_" + AdaptersBucket
	return append(consumeOn(stream), "$JS.API.DIRECT.GET."+stream, "$JS.API.DIRECT.GET."+stream+".>",
		"$JS.API.STREAM.MSG.GET."+stream)
}

// adaptersWrite is what writing and deleting its files takes besides:
// publishing chunks and metadata, and purging a deleted object's chunks.
func adaptersWrite() []string {
	return []string{"$O." + AdaptersBucket + ".>", "$JS.API.STREAM.PURGE.OBJ_" + AdaptersBucket}
}

// fleetService is the fleet service name a role's nodes register under.
func fleetService(role string) string {
	switch role {
	case RoleWorker:
		return FleetWorker
	case RoleEdge:
		return FleetEdge
	case RoleBilling:
		return FleetBilling
	}
	return "none"
}

// RolePermissions is the least a role needs on the bus; pub is its nkey,
// whose private inbox (InboxPrefix) it alone may subscribe to. Everything
// not listed is refused by the server. In particular:
//
//   - only an edge publishes jobs (jobs.>) and only a worker publishes
//     hand-overs (decode.>), so the tenant a worker reads from either was set
//     by an edge from a verified token;
//   - only an edge subscribes to reply frames; only workers consume jobs and
//     hand-overs; only billing consumes usage events, and only billing
//     publishes on the export stream, which only the export role reads;
//   - workers publish async job notices and billing API key alerts on the
//     notify stream, which only edges read and deliver (to webhooks, and
//     as requests to tenants' event subjects, which only each tenant's
//     own credential may read: TenantPermissions);
//   - nobody but the setup role, which only the NATS node holds, creates
//     or changes a stream (a stream can capture, republish or mirror any
//     subject); the operator only inspects, and reads no message;
//   - only workers announce their status and prefixes (StatusPrefix,
//     PrefixPrefix); edges read both to route, workers each other's
//     status. Neither carries a prompt: prefix keys are hashes.
func RolePermissions(role, pub string) *server.Permissions {
	inbox := InboxPrefix(pub) + ".>"
	var pubs, subs []string
	info := []string{"$JS.API.INFO"}
	for _, s := range streamsAll() {
		info = append(info, "$JS.API.STREAM.INFO."+s)
	}
	switch role {
	case RoleEdge:
		pubs = append(pubs, JobsPrefix+">", CancelPrefix+">", ReadyPrefix+">")
		pubs = append(pubs, kvReadWrite(ResultsBucket)...)
		pubs = append(pubs, consumeOn("KV_"+CapacityBucket)...) // watching worker windows
		pubs = append(pubs, consumeOn("KV_"+ResultsBucket)...)  // watching jobs end (WatchEnded)
		pubs = append(pubs, consumeOn(NotifyStream)...)         // delivering async notices to webhooks
		pubs = append(pubs, EventsPrefix+">")                   // and to tenants' subscribers (events.go)
		pubs = append(pubs, kvReadWrite(FinetunesBucket)...)    // tenants' finetunes (finetunes.go)
		pubs = append(pubs, adaptersRead()...)                  // and their files
		pubs = append(pubs, adaptersWrite()...)
		subs = append(subs, ReplyPrefix+">", StatusPrefix+">", PrefixPrefix+">") // routing (docs/routing.md)
	case RoleWorker:
		pubs = append(pubs, ReplyPrefix+">", DecodePrefix+">", DecodeReadyPrefix+">", UsagePrefix+">", HandoffPrefix+">", NotifyPrefix+">", inbox)
		pubs = append(pubs, kvReadWrite(ResultsBucket)...)
		pubs = append(pubs, kvReadWrite(CapacityBucket)...)
		pubs = append(pubs, consumeOn(JobsStream)...)
		pubs = append(pubs, consumeOn(DecodeStream)...)
		pubs = append(pubs, StatusPrefix+">", PrefixPrefix+">")
		pubs = append(pubs, "$JS.API.STREAM.MSG.GET."+JobsStream) // the age of a tenant's backlog (Backlog)
		pubs = append(pubs, adaptersRead()...)                    // the adapter files of jobs (Job.LoRA)
		subs = append(subs, CancelPrefix+">", HandoffPrefix+">", ReadyPrefix+">", DecodeReadyPrefix+">", StatusPrefix+">")
	case RoleBilling:
		pubs = append(pubs, consumeOn(UsageStream)...)
		pubs = append(pubs, ExportPrefix+">", NotifyPrefix+">") // usage export; API key budget alerts
	case RoleExport:
		pubs = append(pubs, consumeOn(ExportStream)...)
	case RoleSetup:
		for _, s := range streamsAll() {
			pubs = append(pubs, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s)
		}
		pubs = append(pubs, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST")
	case RoleOperator:
		pubs = append(pubs, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
			"$JS.API.CONSUMER.NAMES.>", "$JS.API.CONSUMER.LIST.>")
		for _, s := range streamsAll() {
			pubs = append(pubs, "$JS.API.CONSUMER.INFO."+s+".>")
		}
	default:
		// An unknown role may do nothing at all.
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Deny: []string{">"}},
			Subscribe: &server.SubjectPermission{Deny: []string{">"}},
		}
	}
	pubs = append(pubs, info...)
	subs = append(subs, inbox)
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pubs},
		Subscribe: &server.SubjectPermission{Allow: subs},
	}
	switch role {
	case RoleSetup, RoleExport: // answer nothing, ask no one
	case RoleOperator:
		// bulkhead status asks the fleet ($SRV.STATS) and reads the answers
		// in its inbox.
		p.Publish.Allow = append(p.Publish.Allow, "$SRV.>", fleetPrefix+">")
	default:
		// Every node registers in the fleet (RegisterNode) and answers
		// requests there, only to the requester's reply subject, and only
		// under its own role's service name: the requests addressed to a
		// service ($SRV.<verb>.<service>[.<id>]), which ListFleet sends,
		// reach only nodes of that role. The generic $SRV.<verb> every
		// micro service listens on stays open (ListFleet does not ask there).
		svc := fleetService(role)
		p.Subscribe.Allow = append(p.Subscribe.Allow, "$SRV.*", "$SRV.*."+svc, "$SRV.*."+svc+".>", fleetPrefix+">")
		p.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	return p
}
