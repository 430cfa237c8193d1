package sample

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name      string
		stops     []string
		pieces    []string
		wantEmits []string // one per piece
		wantStop  bool
		wantFlush string
	}{
		{
			name:      "no stops passes through",
			pieces:    []string{"hello", " ", "world"},
			wantEmits: []string{"hello", " ", "world"},
		},
		{
			name:      "empty stop strings are ignored",
			stops:     []string{"", ""},
			pieces:    []string{"a", "b"},
			wantEmits: []string{"a", "b"},
		},
		{
			name:      "stop inside one piece drops it and the rest",
			stops:     []string{"<|end|>"},
			pieces:    []string{"hello<|end|>world"},
			wantEmits: []string{"hello"},
			wantStop:  true,
		},
		{
			name:      "stop spanning three pieces",
			stops:     []string{"</s>"},
			pieces:    []string{"hi <", "/", "s> more"},
			wantEmits: []string{"hi ", "", ""},
			wantStop:  true,
		},
		{
			name:      "false alarm is released",
			stops:     []string{"</s>"},
			pieces:    []string{"a <", "/b", "c"},
			wantEmits: []string{"a ", "</b", "c"},
		},
		{
			name:      "held prefix restarts inside itself",
			stops:     []string{"abcd"},
			pieces:    []string{"abab", "cd"},
			wantEmits: []string{"ab", ""},
			wantStop:  true,
		},
		{
			name:      "self-overlapping stop",
			stops:     []string{"aab"},
			pieces:    []string{"a", "a", "a", "a", "b"},
			wantEmits: []string{"", "", "a", "a", ""},
			wantStop:  true,
		},
		{
			name:      "earliest of several stops wins",
			stops:     []string{"world", "lo w"},
			pieces:    []string{"hello world"},
			wantEmits: []string{"hel"},
			wantStop:  true,
		},
		{
			name:      "shorter stop that is a prefix of a longer one",
			stops:     []string{"abc", "ab"},
			pieces:    []string{"xa", "b"},
			wantEmits: []string{"x", ""},
			wantStop:  true,
		},
		{
			name:      "hold back the longest possible prefix over all stops",
			stops:     []string{"END", "xEN"},
			pieces:    []string{"..xE", "Nd"},
			wantEmits: []string{"..", ""},
			wantStop:  true,
		},
		{
			name:      "pushes after a stop return nothing",
			stops:     []string{"!"},
			pieces:    []string{"hi!", "more", "text"},
			wantEmits: []string{"hi", "", ""},
			wantStop:  true,
		},
		{
			name:      "held text comes back on flush",
			stops:     []string{"STOP"},
			pieces:    []string{"abc ST"},
			wantEmits: []string{"abc "},
			wantFlush: "ST",
		},
		{
			// 你 = e4 bd a0, 好 = e5 a5 bd, 。 = e3 80 82
			name:      "multibyte characters split across pieces",
			stops:     []string{"。"},
			pieces:    []string{"\xe4\xbd", "\xa0\xe5", "\xa5\xbd\xe3\x80", "\x82"},
			wantEmits: []string{"", "你", "好", ""},
			wantStop:  true,
		},
		{
			name:      "incomplete character held without stops",
			pieces:    []string{"caf\xc3", "\xa9!"},
			wantEmits: []string{"caf", "é!"},
		},
		{
			name:      "multibyte stop sharing a lead byte",
			stops:     []string{"é!"},
			pieces:    []string{"caf\xc3", "\xa9", "a"},
			wantEmits: []string{"caf", "", "éa"},
		},
		{
			name:      "incomplete character at the end comes back on flush",
			stops:     []string{"x"},
			pieces:    []string{"ok\xe2\x82"},
			wantEmits: []string{"ok"},
			wantFlush: "\xe2\x82",
		},
		{
			name:      "invalid bytes are not held forever",
			pieces:    []string{"a\xff", "\x80b"},
			wantEmits: []string{"a\xff", "\x80b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewStopMatcher(tt.stops)
			var emits []string
			var stopped bool
			for _, p := range tt.pieces {
				e, s := m.Push(p)
				emits = append(emits, e)
				stopped = s
			}
			if !slices.Equal(emits, tt.wantEmits) {
				t.Errorf("emits = %q, want %q", emits, tt.wantEmits)
			}
			if stopped != tt.wantStop || m.Stopped() != tt.wantStop {
				t.Errorf("stopped = %v (Stopped() %v), want %v", stopped, m.Stopped(), tt.wantStop)
			}
			if got := m.Flush(); got != tt.wantFlush {
				t.Errorf("Flush() = %q, want %q", got, tt.wantFlush)
			}
		})
	}
}

// FuzzStopMatcher checks, for any text cut into any pieces, that the emitted
// text plus the flush is exactly the text before the first stop, that stopped
// says whether there was one, and that valid UTF-8 is never emitted split.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello world</s>tail", "</s>", "lo w", uint64(12345))
	f.Add("你好。再见", "。", "", uint64(7))
	f.Add("aaaab", "aab", "ab", uint64(1))
	f.Add("caf\xc3\xa9!", "é!", "x", uint64(99))
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, cuts uint64) {
		stops := []string{stop1, stop2}
		want, wantStop := text, false
		for _, s := range stops {
			if i := strings.Index(text, s); s != "" && i >= 0 && i <= len(want) {
				want, wantStop = text[:i], true
			}
		}
		m := NewStopMatcher(stops)
		var got strings.Builder
		var stopped bool
		valid := utf8.ValidString(text) && utf8.ValidString(stop1) && utf8.ValidString(stop2)
		rest := text
		for len(rest) > 0 {
			n := 1 + int(cuts%7)
			cuts = cuts/7 ^ cuts<<13
			n = min(n, len(rest))
			e, s := m.Push(rest[:n])
			rest = rest[n:]
			if valid && !utf8.ValidString(e) {
				t.Fatalf("emitted %q splits a character", e)
			}
			got.WriteString(e)
			stopped = s
		}
		if !stopped {
			got.WriteString(m.Flush())
		}
		if got.String() != want || stopped != wantStop {
			t.Fatalf("got %q stopped=%v, want %q stopped=%v", got.String(), stopped, want, wantStop)
		}
	})
}

// TestStopMatcherPieceAllocs checks that a piece emitted whole, the usual
// case, is returned as it is: no string is allocated per token.
func TestStopMatcherPieceAllocs(t *testing.T) {
	m := NewStopMatcher([]string{"\n\nUser:"})
	pieces := []string{" Once", " upon", " a", " time", ",", " é"}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		p := pieces[i%len(pieces)]
		if got, stopped := m.Push(p); got != p || stopped {
			t.Fatalf("Push(%q) = %q, %v", p, got, stopped)
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per piece, want 0", allocs)
	}
}
