package tenants

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// ErrConfig reports a class table that cannot be used.
var ErrConfig = errors.New("tenants: invalid config")

// Defaults of the class every tenant not assigned one gets. Its
// MaxQueued is 0: without a configured class bound only the jobs stream's
// per-tenant bound applies, and an edge without quotas needs no Redis.
const (
	DefaultClass     = "default"
	DefaultMaxQueued = 0
	DefaultWeight    = 1
	// MaxWeight bounds a class's weight: a scheduler's counters stay
	// meaningful well within float64 at this ratio.
	MaxWeight = 1000
)

// Class is one tenant class.
type Class struct {
	Name string
	// MaxQueued bounds the class's tenants' jobs queued or running at
	// once, each tenant on its own, across all models: a synchronous
	// request counts one until it ends, an async batch one per job until
	// that job ends. 0: no class bound (the jobs stream's per-tenant
	// bound, queue.StreamConfig.MaxJobsPerTenant, still applies).
	MaxQueued int
	// Weight is the tenants' share of a worker when several tenants wait:
	// a tenant of weight 2 is served twice the tokens of one of weight 1.
	// It travels on each job (queue.Job.Weight). Must be in (0, MaxWeight].
	Weight float64
	// PrefixCacheOff keeps the class's tenants out of the prefix cache:
	// their jobs never use it (queue.Job.CachePrefix is false), whatever
	// the request body says. The zero value, the default, leaves the cache
	// on.
	PrefixCacheOff bool
}

// Config is the class table: the classes, which tenants belong to which,
// and the class of everyone else.
type Config struct {
	Classes []Class           // DefaultClass, when not listed, is {DefaultMaxQueued, DefaultWeight}
	Members map[string]string // tenant id → class name
	Default string            // class of tenants not in Members; "" means DefaultClass
}

// Validate reports the first unusable field.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for _, cl := range c.Classes {
		switch {
		case !validName(cl.Name):
			return fmt.Errorf("%w: class name %q: use 1-64 letters, digits, '-' or '_'", ErrConfig, cl.Name)
		case seen[cl.Name]:
			return fmt.Errorf("%w: class %q listed twice", ErrConfig, cl.Name)
		case cl.MaxQueued < 0:
			return fmt.Errorf("%w: class %q: max_queued %d is negative", ErrConfig, cl.Name, cl.MaxQueued)
		case !(cl.Weight > 0 && cl.Weight <= MaxWeight):
			return fmt.Errorf("%w: class %q: weight %v must lie in (0, %d]", ErrConfig, cl.Name, cl.Weight, MaxWeight)
		}
		seen[cl.Name] = true
	}
	def := c.defaultName()
	if !seen[def] && def != DefaultClass {
		return fmt.Errorf("%w: default class %q is not defined", ErrConfig, def)
	}
	for tenant, class := range c.Members {
		if !queue.ValidTenant(tenant) {
			return fmt.Errorf("%w: tenant %q: use 1-64 letters, digits, '-' or '_'", ErrConfig, tenant)
		}
		if !seen[class] && class != DefaultClass {
			return fmt.Errorf("%w: tenant %q is in class %q, which is not defined", ErrConfig, tenant, class)
		}
	}
	return nil
}

func (c *Config) defaultName() string {
	if c.Default == "" {
		return DefaultClass
	}
	return c.Default
}

// Table answers a tenant's class. It is read-only after New and safe for
// concurrent use.
type Table struct {
	classes map[string]Class
	members map[string]string
	def     Class
}

// New validates cfg and builds its table.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Table{classes: map[string]Class{
		DefaultClass: {Name: DefaultClass, MaxQueued: DefaultMaxQueued, Weight: DefaultWeight},
	}, members: map[string]string{}}
	for _, cl := range cfg.Classes {
		t.classes[cl.Name] = cl
	}
	for tenant, class := range cfg.Members {
		t.members[tenant] = class
	}
	t.def = t.classes[cfg.defaultName()]
	return t, nil
}

// Of returns tenant's class: its assigned one, else the default class.
func (t *Table) Of(tenant string) Class {
	if name, ok := t.members[tenant]; ok {
		return t.classes[name]
	}
	return t.def
}

// Classes lists the classes by name, for logs and documentation.
func (t *Table) Classes() []Class {
	out := make([]Class, 0, len(t.classes))
	for _, cl := range t.classes {
		out = append(out, cl)
	}
	slices.SortFunc(out, func(a, b Class) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ParseClasses reads the --tenant-classes syntax: classes separated by ';',
// each "name:key=value,key=value" with the keys max_queued, weight and
// prefix_cache (on or off; omitted keys take DefaultMaxQueued,
// DefaultWeight and on). For example
// "free:max_queued=32,prefix_cache=off;pro:max_queued=512,weight=4".
// Empty: no classes.
func ParseClasses(spec string) ([]Class, error) {
	var out []Class
	for part := range strings.SplitSeq(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, body, _ := strings.Cut(part, ":")
		cl := Class{Name: strings.TrimSpace(name), MaxQueued: DefaultMaxQueued, Weight: DefaultWeight}
		for kv := range strings.SplitSeq(body, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			if err := cl.set(kv); err != nil {
				return nil, err
			}
		}
		out = append(out, cl)
	}
	return out, nil
}

func (cl *Class) set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	switch {
	case !ok:
		return fmt.Errorf("%w: class %q: %q is not key=value", ErrConfig, cl.Name, kv)
	case k == "max_queued":
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%w: class %q: max_queued %q is not an integer", ErrConfig, cl.Name, v)
		}
		cl.MaxQueued = n
	case k == "weight":
		w, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(w) {
			return fmt.Errorf("%w: class %q: weight %q is not a number", ErrConfig, cl.Name, v)
		}
		cl.Weight = w
	case k == "prefix_cache":
		switch v {
		case "on":
			cl.PrefixCacheOff = false
		case "off":
			cl.PrefixCacheOff = true
		default:
			return fmt.Errorf("%w: class %q: prefix_cache %q is not on or off", ErrConfig, cl.Name, v)
		}
	default:
		return fmt.Errorf("%w: class %q: unknown key %q (want max_queued, weight or prefix_cache)", ErrConfig, cl.Name, k)
	}
	return nil
}

// ParseMembers reads the --tenant-class syntax: "tenant=class" pairs
// separated by ','. A tenant listed twice is refused.
func ParseMembers(spec string) (map[string]string, error) {
	out := map[string]string{}
	for pair := range strings.SplitSeq(spec, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		tenant, class, ok := strings.Cut(pair, "=")
		tenant, class = strings.TrimSpace(tenant), strings.TrimSpace(class)
		if !ok || tenant == "" || class == "" {
			return nil, fmt.Errorf("%w: %q is not tenant=class", ErrConfig, pair)
		}
		if _, dup := out[tenant]; dup {
			return nil, fmt.Errorf("%w: tenant %q assigned twice", ErrConfig, tenant)
		}
		out[tenant] = class
	}
	return out, nil
}

// validName is the rule for class names: the tenant-id rule (queue.ValidTenant).
func validName(s string) bool { return queue.ValidTenant(s) }
