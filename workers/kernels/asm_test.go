package kernels

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// vectorOperand matches an XMM, YMM or ZMM register operand.
var vectorOperand = regexp.MustCompile(`\b[XYZ]([0-9]|[12][0-9]|3[01])\b`)

// legacySSE returns the lines of an assembly source that use a vector
// register in an instruction without the VEX or EVEX encoding (a mnemonic
// not starting with V, e.g. Go's MOVL AX, X6, which assembles to SSE2's
// MOVD). Mixed with AVX code whose upper register halves are live, such an
// instruction costs a state transition or a merge on every execution: the
// K-quant AVX2 kernels ran 30 to 100 times slower for it.
func legacySSE(src string) []string {
	var bad []string
	for _, line := range strings.Split(src, "\n") {
		code, _, _ := strings.Cut(line, "//")
		code = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(code), `\`))
		if code == "" || strings.HasPrefix(code, "#") || strings.HasPrefix(code, "TEXT") || strings.HasPrefix(code, "DATA") || strings.HasPrefix(code, "GLOBL") {
			continue
		}
		mnemonic, operands, _ := strings.Cut(code, " ")
		if strings.Contains(mnemonic, "(") || strings.HasSuffix(mnemonic, ":") {
			continue // a macro's use or a label
		}
		if !strings.HasPrefix(mnemonic, "V") && vectorOperand.MatchString(operands) {
			bad = append(bad, strings.TrimSpace(line))
		}
	}
	return bad
}

// TestNoLegacySSE: every instruction on a vector register in the assembly is
// VEX or EVEX encoded.
func TestNoLegacySSE(t *testing.T) {
	for _, planted := range []string{"\tMOVL AX, X6 \\", "\tPXOR X1, X1", "\tMOVQ X0, AX // spill"} {
		if len(legacySSE(planted)) != 1 {
			t.Errorf("legacySSE misses %q", planted)
		}
	}
	for _, fine := range []string{"\tVMOVD AX, X6 \\", "\tMOVQ AX, BX", "\tQ4KCHUNK(16, 4, 36, 0, 1)", "// MOVL AX, X6", "loop:"} {
		if got := legacySSE(fine); len(got) != 0 {
			t.Errorf("legacySSE flags %q", fine)
		}
	}
	files, err := filepath.Glob("*_amd64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no assembly files (%v)", err)
	}
	headers, _ := filepath.Glob("*_amd64.h") // macros the assembly includes
	files = append(files, headers...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range legacySSE(string(b)) {
			t.Errorf("%s: legacy SSE encoding on a vector register: %s", f, l)
		}
	}
}
