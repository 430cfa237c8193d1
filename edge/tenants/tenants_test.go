package tenants

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseAndLookup(t *testing.T) {
	classes, err := ParseClasses(" free:max_queued=32, prefix_cache=off ; pro:max_queued=512,weight=4,prefix_cache=on;batch:weight=0.5")
	if err != nil {
		t.Fatal(err)
	}
	want := []Class{{"free", 32, 1, true}, {"pro", 512, 4, false}, {"batch", DefaultMaxQueued, 0.5, false}}
	if !reflect.DeepEqual(classes, want) {
		t.Fatalf("classes %+v, want %+v", classes, want)
	}
	members, err := ParseMembers("acme=pro, globex=batch")
	if err != nil {
		t.Fatal(err)
	}
	tab, err := New(Config{Classes: classes, Members: members, Default: "free"})
	if err != nil {
		t.Fatal(err)
	}
	for tenant, class := range map[string]string{"acme": "pro", "globex": "batch", "initech": "free"} {
		if got := tab.Of(tenant).Name; got != class {
			t.Errorf("Of(%s) = %s, want %s", tenant, got, class)
		}
	}
	if !tab.Of("initech").PrefixCacheOff || tab.Of("acme").PrefixCacheOff {
		t.Errorf("prefix cache off: free %v, pro %v; want true, false", tab.Of("initech").PrefixCacheOff, tab.Of("acme").PrefixCacheOff)
	}
	plain, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Of("anyone"); got != (Class{DefaultClass, DefaultMaxQueued, DefaultWeight, false}) {
		t.Errorf("empty table: %+v", got)
	}
	if n := len(tab.Classes()); n != 4 {
		t.Errorf("%d classes listed, want 4 (with default)", n)
	}
}

func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		spec, says string // says: a part of the error's text
	}{
		{"free:max_queued=x", `max_queued "x" is not an integer`},
		{"free:weight=y", `weight "y" is not a number`},
		{"free:weight", `"weight" is not key=value`},
		{"free:weight=NaN", `weight "NaN" is not a number`},
		{"free:speed=1", `unknown key "speed" (want max_queued, weight or prefix_cache)`},
		{"free:prefix_cache=no", `prefix_cache "no" is not on or off`},
		{"free:prefix_cache=", `prefix_cache "" is not on or off`},
		{"free:prefix_cache=OFF", `prefix_cache "OFF" is not on or off`},
	} {
		_, err := ParseClasses(c.spec)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseClasses(%q) = %v, want ErrConfig saying %s", c.spec, err, c.says)
		}
	}
	for _, spec := range []string{"acme", "acme=", "=pro", "acme=pro,acme=free"} {
		if _, err := ParseMembers(spec); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseMembers(%q) = %v, want ErrConfig", spec, err)
		}
	}
	for name, cfg := range map[string]Config{
		"bad name":        {Classes: []Class{{"a.b", 1, 1, false}}},
		"twice":           {Classes: []Class{{"a", 1, 1, false}, {"a", 2, 1, false}}},
		"negative bound":  {Classes: []Class{{"a", -1, 1, false}}},
		"zero weight":     {Classes: []Class{{"a", 1, 0, false}}},
		"huge weight":     {Classes: []Class{{"a", 1, MaxWeight + 1, false}}},
		"unknown default": {Default: "gold"},
		"unknown class":   {Members: map[string]string{"acme": "gold"}},
		"bad tenant":      {Members: map[string]string{"ac me": DefaultClass}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}
