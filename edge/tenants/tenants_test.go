package tenants

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseAndLookup(t *testing.T) {
	classes, err := ParseClasses(" free:max_queued=32 ; pro:max_queued=512,weight=4;batch:weight=0.5")
	if err != nil {
		t.Fatal(err)
	}
	want := []Class{{"free", 32, 1}, {"pro", 512, 4}, {"batch", DefaultMaxQueued, 0.5}}
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
	plain, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Of("anyone"); got != (Class{DefaultClass, DefaultMaxQueued, DefaultWeight}) {
		t.Errorf("empty table: %+v", got)
	}
	if n := len(tab.Classes()); n != 4 {
		t.Errorf("%d classes listed, want 4 (with default)", n)
	}
}

func TestRefusals(t *testing.T) {
	for _, spec := range []string{"free:max_queued=x", "free:weight=y", "free:speed=1", "free:weight", "free:weight=NaN"} {
		if _, err := ParseClasses(spec); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseClasses(%q) = %v, want ErrConfig", spec, err)
		}
	}
	for _, spec := range []string{"acme", "acme=", "=pro", "acme=pro,acme=free"} {
		if _, err := ParseMembers(spec); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseMembers(%q) = %v, want ErrConfig", spec, err)
		}
	}
	for name, cfg := range map[string]Config{
		"bad name":        {Classes: []Class{{"a.b", 1, 1}}},
		"twice":           {Classes: []Class{{"a", 1, 1}, {"a", 2, 1}}},
		"negative bound":  {Classes: []Class{{"a", -1, 1}}},
		"zero weight":     {Classes: []Class{{"a", 1, 0}}},
		"huge weight":     {Classes: []Class{{"a", 1, MaxWeight + 1}}},
		"unknown default": {Default: "gold"},
		"unknown class":   {Members: map[string]string{"acme": "gold"}},
		"bad tenant":      {Members: map[string]string{"ac me": DefaultClass}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}
