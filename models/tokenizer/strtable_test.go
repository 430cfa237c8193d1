package tokenizer

import "testing"

func TestStrTable(t *testing.T) {
	texts := []string{"a", "", "bc", "\x00\xff", "Ġthe"}
	st, err := newStrTable(len(texts), 1, func(i int) string { return texts[i] })
	if err != nil {
		t.Fatal(err)
	}
	if st.len() != len(texts) {
		t.Fatalf("len %d, want %d", st.len(), len(texts))
	}
	for i, want := range texts {
		if got := st.at(int32(i)); got != want {
			t.Errorf("at(%d) = %q, want %q", i, got, want)
		}
	}
	var zero strTable
	if zero.len() != 0 {
		t.Errorf("zero table len %d", zero.len())
	}
}
