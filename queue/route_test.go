package queue

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPrefixKeys: two prompts of one tenant share exactly the keys of the
// blocks they share; two tenants share none; only whole blocks are keyed,
// at most MaxPrefixKeys of them.
func TestPrefixKeys(t *testing.T) {
	block := func(c string) string { return strings.Repeat(c, PrefixBlock) }
	p1 := block("a") + block("b") + block("c")
	p2 := block("a") + block("b") + block("x") + block("y")
	k1, k2 := PrefixKeys("t1", p1), PrefixKeys("t1", p2)
	if len(k1) != 3 || len(k2) != 4 {
		t.Fatalf("%d and %d keys, want 3 and 4", len(k1), len(k2))
	}
	if !slices.Equal(k1[:2], k2[:2]) || k1[2] == k2[2] {
		t.Errorf("keys %x and %x: want the first two shared and the third not", k1, k2)
	}
	if other := PrefixKeys("t2", p1); slices.ContainsFunc(other, func(k uint64) bool { return slices.Contains(k1, k) }) {
		t.Errorf("tenant t2's keys %x share one with t1's %x", other, k1)
	}
	if k := PrefixKeys("t1", p1+"tail"); !slices.Equal(k, k1) {
		t.Errorf("a partial block changed the keys: %x, want %x", k, k1)
	}
	if k := PrefixKeys("t1", block("a")[1:]); k != nil {
		t.Errorf("a prompt shorter than one block has keys %x", k)
	}
	if n := len(PrefixKeys("t1", strings.Repeat("z", (MaxPrefixKeys+5)*PrefixBlock))); n != MaxPrefixKeys {
		t.Errorf("%d keys for a long prompt, want %d", n, MaxPrefixKeys)
	}
}

// TestRoutingCodecs: announcements that cannot be used are refused.
func TestRoutingCodecs(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		ok           bool
	}{
		{"valid", `{"worker":"w1","running":1,"waiting":0,"max_batch":16,"free_pages":3,"pages":4,"page_size":16}`, true},
		{"no worker", `{"running":1}`, false},
		{"negative", `{"worker":"w1","waiting":-1}`, false},
		{"more free than pages", `{"worker":"w1","free_pages":5,"pages":4}`, false},
		{"not json", `{"worker":`, false},
	} {
		t.Run("status "+tc.name, func(t *testing.T) {
			_, err := DecodeStatus([]byte(tc.status))
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrBadMessage) {
				t.Errorf("DecodeStatus: %v, want ok %v (else ErrBadMessage)", err, tc.ok)
			}
		})
	}
	for _, tc := range []struct {
		name, notice string
		ok           bool
	}{
		{"valid", `{"worker":"w1","tenant":"` + TenantToken("a") + `","keys":[1,2]}`, true},
		{"tenant not a token", `{"worker":"w1","tenant":"a.b","keys":[1]}`, false},
		{"no worker", `{"tenant":"` + TenantToken("a") + `","keys":[1]}`, false},
		{"too many keys", `{"worker":"w1","tenant":"` + TenantToken("a") + `","keys":[` + strings.Repeat("1,", MaxPrefixKeys) + `1]}`, false},
	} {
		t.Run("prefix "+tc.name, func(t *testing.T) {
			_, err := DecodePrefixNotice([]byte(tc.notice))
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrBadMessage) {
				t.Errorf("DecodePrefixNotice: %v, want ok %v (else ErrBadMessage)", err, tc.ok)
			}
		})
	}
}
