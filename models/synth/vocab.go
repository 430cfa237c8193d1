package synth

import (
	"fmt"
	"strings"
)

// Token types as llama.cpp numbers them (tokenizer.ggml.token_type).
const (
	TokenNormal  int32 = 1
	TokenUnknown int32 = 2
	TokenControl int32 = 3
	TokenByte    int32 = 6
)

// Special token ids of the synthetic vocabulary.
const (
	UnkID = 0
	BOSID = 1
	EOSID = 2
)

// firstPiece is the id of the first normal piece: after <unk>, <s>, </s> and the
// 256 byte tokens.
const firstPiece = 3 + 256

// spaceMark is SentencePiece's visible space, U+2581.
const spaceMark = "▁"

// commonWords are frequent English words; each becomes a "▁word" piece.
var commonWords = strings.Fields(`the of and to a in is it you that he was for on are with as I his they
be at one have this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no most people
my over know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move right
boy old too same tell does set three want air well also play small end put home read hand port large
spell add even land here must big high such follow act why ask men change went light kind off need
house picture try us again animal point mother world near build self earth father once upon happy sad
girl dog cat tree sun day night friend little big red blue green ball park toy`)

// vocabulary returns n tokens, their scores and types: <unk>, <s>, </s>, the 256
// byte tokens <0x00>..<0xFF>, then unique normal pieces with strictly
// descending scores: "▁", each printable ASCII character, "▁" plus each, common
// words with "▁", then generated lowercase combinations of 2, 3 and 4 letters,
// each bare and with "▁", until n are filled.
func vocabulary(n int) (tokens []string, scores []float32, types []int32, err error) {
	tokens = make([]string, 0, n)
	scores = make([]float32, 0, n)
	types = make([]int32, 0, n)
	add := func(tok string, score float32, typ int32) {
		tokens = append(tokens, tok)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, TokenUnknown)
	add("<s>", 0, TokenControl)
	add("</s>", 0, TokenControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, TokenByte)
	}
	seen := make(map[string]bool, n)
	piece := func(p string) bool { // reports whether the vocabulary is full
		if len(tokens) == n {
			return true
		}
		if !seen[p] {
			seen[p] = true
			add(p, -float32(len(tokens)-firstPiece+1), TokenNormal)
		}
		return len(tokens) == n
	}
	if piece(spaceMark) {
		return tokens, scores, types, nil
	}
	for pass := range 2 {
		for c := byte('!'); c <= '~'; c++ {
			p := string(c)
			if pass == 1 {
				p = spaceMark + p
			}
			if piece(p) {
				return tokens, scores, types, nil
			}
		}
	}
	for _, w := range commonWords {
		if piece(spaceMark + w) {
			return tokens, scores, types, nil
		}
	}
	for length := 2; length <= 4; length++ {
		full := false
		combinations(length, func(s string) bool {
			full = piece(s) || piece(spaceMark+s)
			return full
		})
		if full {
			return tokens, scores, types, nil
		}
	}
	return nil, nil, nil, fmt.Errorf("%w: cannot generate %d unique tokens (at most %d)", ErrBadShape, n, len(tokens))
}

// archTokens are control tokens an architecture's vocabulary must hold: llama.cpp
// looks <|endoftext|> up by text in a model named phi3 (llama-vocab.cpp, the
// per-token attributes) and fails to load one without it.
var archTokens = map[Arch][]string{ArchPhi3: {"<|endoftext|>"}}

// addArchTokens replaces the last normal pieces of a vocabulary with the
// architecture's control tokens (score 0), in place.
func addArchTokens(a Arch, tokens []string, scores []float32, types []int32) {
	extra := archTokens[a]
	for i, tok := range extra {
		j := len(tokens) - len(extra) + i
		tokens[j], scores[j], types[j] = tok, 0, TokenControl
	}
}

// combinations calls f with every string of length lowercase letters in
// lexicographic order until f returns true.
func combinations(length int, f func(string) bool) {
	buf := make([]byte, length)
	for i := range buf {
		buf[i] = 'a'
	}
	for {
		if f(string(buf)) {
			return
		}
		i := length - 1
		for i >= 0 && buf[i] == 'z' {
			buf[i] = 'a'
			i--
		}
		if i < 0 {
			return
		}
		buf[i]++
	}
}
