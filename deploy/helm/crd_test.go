package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// schema is the part of an OpenAPI v3 schema a CRD's structural schema uses.
type schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	Required             []string           `json:"required"`
	Enum                 []any              `json:"enum"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
}

// validate checks v against s the way the API server checks a custom
// resource: types, required fields, enums, bounds, and no field that the
// schema does not declare (pruning would drop it silently).
func (s *schema) validate(path string, v any) []string {
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, a...)) }
	if s.IntOrString {
		switch v.(type) {
		case float64, string:
		default:
			fail("want an integer or a string, got %T", v)
		}
		return errs
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("want an object, got %T", v)
			return errs
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				fail("required field %q missing", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch {
			case s.Properties[k] != nil:
				errs = append(errs, s.Properties[k].validate(path+"."+k, m[k])...)
			case s.AdditionalProperties != nil:
				errs = append(errs, s.AdditionalProperties.validate(path+"."+k, m[k])...)
			case !s.PreserveUnknown:
				fail("unknown field %q", k)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			fail("want an array, got %T", v)
			return errs
		}
		for i, e := range l {
			if s.Items != nil {
				errs = append(errs, s.Items.validate(fmt.Sprintf("%s[%d]", path, i), e)...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			fail("want a string, got %T (%v)", v, v)
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok {
			fail("want a %s, got %T (%v)", s.Type, v, v)
			return errs
		}
		if s.Type == "integer" && n != float64(int64(n)) {
			fail("want an integer, got %v", n)
		}
		if s.Minimum != nil && n < *s.Minimum {
			fail("%v is under the minimum %v", n, *s.Minimum)
		}
		if s.Maximum != nil && n > *s.Maximum {
			fail("%v is over the maximum %v", n, *s.Maximum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want a boolean, got %T", v)
		}
	case "":
		if !s.PreserveUnknown && s.Properties != nil {
			fail("schema without a type")
		}
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		fail("%v is not one of %v", v, s.Enum)
	}
	return errs
}

// kedaSchema reads the ScaledObject CRD of the KEDA module this module
// requires (its source is in the module cache with the Go types).
func kedaSchema(t *testing.T) (version string, s *schema) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
	if err != nil {
		t.Fatalf("go list -m keda: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config/crd/bases/keda.sh_scaledobjects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string `json:"group"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Schema.OpenAPIV3Schema != nil {
			return crd.Spec.Group + "/" + v.Name, v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatal("the CRD serves no version with a schema")
	return "", nil
}

// TestScaledObjectSchema: every ScaledObject the chart renders passes KEDA's
// own CRD schema (beside the strict decoding into KEDA's Go types).
func TestScaledObjectSchema(t *testing.T) {
	version, s := kedaSchema(t)
	// metadata is checked by the API server itself, not by the CRD.
	s.Properties["metadata"] = &schema{Type: "object", PreserveUnknown: true}
	for set, vs := range valueSets(t) {
		manifest, err := vs.template()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, doc := range releaseutil.SplitManifests(manifest) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatal(err)
			}
			if obj["kind"] != "ScaledObject" {
				continue
			}
			n++
			if obj["apiVersion"] != version {
				t.Errorf("%s: apiVersion %v, the CRD serves %s", set, obj["apiVersion"], version)
			}
			for _, e := range s.validate("ScaledObject", obj) {
				t.Errorf("%s: %s", set, e)
			}
		}
		if n == 0 {
			t.Errorf("%s: no ScaledObject rendered", set)
		}
	}
	// The checker itself refuses what the API server would.
	bad := map[string]any{"apiVersion": version, "kind": "ScaledObject", "metadata": map[string]any{},
		"spec": map[string]any{"scaleTargetRef": map[string]any{"name": "x"}, "triggers": []any{map[string]any{"type": "nats-jetstream", "metadata": map[string]any{}}},
			"minReplicaCount": "1", "surprise": true}}
	if errs := s.validate("bad", bad); len(errs) < 2 {
		t.Errorf("a string minReplicaCount and an unknown field pass: %v", errs)
	}
}
