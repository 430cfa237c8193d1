package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// renderPiece is llama.cpp's token_to_piece with special = true and no strip:
// what a token stands for as bytes.
func (t *Tokenizer) renderPiece(id int32) string {
	a, text := t.attrs[id], t.tokens.at(id)
	switch {
	case a&(attrUnknown|attrControl|attrUserDefined) != 0:
		return text
	case a&attrNormal != 0:
		if t.kind == kindSPM || t.kind == kindWPM || t.kind == kindUGM {
			return strings.ReplaceAll(text, "▁", " ")
		}
		return decodeByteChars(text)
	case a&attrByte != 0:
		b, _ := parseByteToken(text)
		return string([]byte{b})
	}
	return "" // undefined and unused tokens render as nothing
}

// decodeByteChars maps GPT-2 byte stand-ins back to bytes. A character outside
// the alphabet is written as llama.cpp writes it: [UNK_BYTE_0x<hex><text>].
func decodeByteChars(text string) string {
	var b []byte
	var enc [4]byte
	for _, r := range decodeRunes(text, nil) {
		if c, ok := charByte[r]; ok {
			b = append(b, c)
			continue
		}
		b = append(b, "[UNK_BYTE_0x"...)
		for _, x := range appendRune(enc[:0], r) {
			b = fmt.Appendf(b, "%02x", x)
		}
		b = append(b, text...)
		b = append(b, ']')
	}
	return string(b)
}

// DecodeOption adjusts Decode and NewStreamDecoder.
type DecodeOption func(*decodeConfig)

type decodeConfig struct {
	special   bool // render control and unknown tokens as their text
	keepSpace bool // do not strip the first piece's leading space
}

// WithSpecial renders control and unknown tokens ("<s>", "<|im_end|>") as their
// text instead of as nothing.
func WithSpecial() DecodeOption { return func(c *decodeConfig) { c.special = true } }

// KeepLeadingSpace keeps the space a SentencePiece vocabulary puts in front of
// the first token. Use it when the ids continue earlier text, as generated
// tokens do; without it the first piece loses one leading space, as in
// llama.cpp's detokenize.
func KeepLeadingSpace() DecodeOption { return func(c *decodeConfig) { c.keepSpace = true } }

// Decode converts ids to text as llama.cpp's llama_detokenize does with
// remove_special = false: control tokens render as nothing (unless
// WithSpecial), a SentencePiece vocabulary drops one leading space from the
// first piece (so a leading BOS absorbs it), and BPE vocabularies whose
// metadata asks for it get clean_up_tokenization_spaces. Ids outside the
// vocabulary render as nothing. Bytes that do not form valid UTF-8 become
// U+FFFD, so the result equals what a StreamDecoder yields for the same ids.
func (t *Tokenizer) Decode(ids []int32, opts ...DecodeOption) string {
	d := t.NewStreamDecoder(opts...)
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Next(id))
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

// StreamDecoder turns ids into text one at a time. Every chunk it returns is
// valid UTF-8: bytes of a sequence split across tokens (byte-fallback tokens,
// partial BPE bytes) are held back until the sequence completes, and text that
// space clean-up may still change is held back until it cannot. The chunks
// concatenate to Decode of the same ids. It is not safe for concurrent use.
type StreamDecoder struct {
	t       *Tokenizer
	cfg     decodeConfig
	first   bool
	clean   cleaner
	pending []byte // cleaned bytes not yet emitted: an incomplete UTF-8 tail
	out     []byte
}

// NewStreamDecoder starts decoding a new sequence of ids.
func (t *Tokenizer) NewStreamDecoder(opts ...DecodeOption) *StreamDecoder {
	d := &StreamDecoder{t: t, first: true}
	for _, o := range opts {
		o(&d.cfg)
	}
	d.clean.on = t.cleanSpaces
	return d
}

// Next adds one id and returns the text that became final.
func (d *StreamDecoder) Next(id int32) string {
	p := d.piece(id)
	if d.first {
		d.first = false
		if d.t.addSpacePrefix && !d.cfg.keepSpace {
			p = strings.TrimPrefix(p, " ")
		}
	}
	d.pending = d.clean.write(d.pending, p)
	return d.emit(false, p)
}

// Flush returns whatever is still held back; the decoder then starts over as
// if new (the next id is again a first piece).
func (d *StreamDecoder) Flush() string {
	d.pending = d.clean.flush(d.pending)
	s := d.emit(true, "")
	d.first = true
	return s
}

func (d *StreamDecoder) piece(id int32) string {
	t := d.t
	if id < 0 || int(id) >= t.pieces.len() {
		return ""
	}
	if !d.cfg.special && t.attrs[id]&(attrUnknown|attrControl) != 0 {
		return ""
	}
	return t.pieces.at(id)
}

// emit returns the longest valid UTF-8 prefix of pending, replacing bytes that
// can never start a valid sequence by U+FFFD; at end every byte is final.
// When that is exactly piece (the usual case: a whole piece, nothing held
// back), piece itself is returned, so a decode step allocates no string.
func (d *StreamDecoder) emit(end bool, piece string) string {
	d.out = d.out[:0]
	b := d.pending
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			d.out = append(d.out, b[i])
			i++
			continue
		}
		if !end && !utf8.FullRune(b[i:]) {
			break // might still complete
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			d.out = append(d.out, "\uFFFD"...)
		} else {
			d.out = append(d.out, b[i:i+n]...)
		}
		i += n
	}
	d.pending = append(d.pending[:0], b[i:]...)
	if string(d.out) == piece {
		return piece
	}
	return string(d.out)
}

// cleaner is llama.cpp's clean_up_tokenization_spaces as a stream: its three
// passes run as three chained filters, each holding back only the few bytes
// its rule still needs to see past.
type cleaner struct {
	on bool
	// pass 1: a space before ? ! . , is dropped.
	p1Space bool
	// pass 2: " ' " becomes "'"; state 0 none held, 1 " " held, 2 " '" held.
	p2 int
	// pass 3: a space before 's 'm 're 've is dropped; q holds the undecided tail.
	q []byte
}

func (c *cleaner) write(dst []byte, s string) []byte {
	if !c.on {
		return append(dst, s...)
	}
	for i := 0; i < len(s); i++ {
		dst = c.pass1(dst, s[i])
	}
	return dst
}

func (c *cleaner) flush(dst []byte) []byte {
	if !c.on {
		return dst
	}
	if c.p1Space {
		c.p1Space = false
		dst = c.pass2(dst, ' ')
	}
	switch c.p2 {
	case 1:
		dst = c.pass3(dst, ' ')
	case 2:
		dst = c.pass3(dst, ' ')
		dst = c.pass3(dst, '\'')
	}
	c.p2 = 0
	dst = c.drain3(dst, true)
	return dst
}

func (c *cleaner) pass1(dst []byte, x byte) []byte {
	if c.p1Space {
		c.p1Space = false
		if x != '?' && x != '!' && x != '.' && x != ',' {
			dst = c.pass2(dst, ' ')
		}
	}
	if x == ' ' {
		c.p1Space = true
		return dst
	}
	return c.pass2(dst, x)
}

func (c *cleaner) pass2(dst []byte, x byte) []byte {
	switch c.p2 {
	case 1: // " " held
		switch x {
		case '\'':
			c.p2 = 2
			return dst
		case ' ':
			return c.pass3(dst, ' ') // the new space stays held
		}
		c.p2 = 0
		dst = c.pass3(dst, ' ')
		return c.pass3(dst, x)
	case 2: // " '" held
		c.p2 = 0
		if x == ' ' {
			return c.pass3(dst, '\'') // both spaces go; the second cannot start a match
		}
		dst = c.pass3(dst, ' ')
		dst = c.pass3(dst, '\'')
		return c.pass3(dst, x)
	}
	if x == ' ' {
		c.p2 = 1
		return dst
	}
	return c.pass3(dst, x)
}

func (c *cleaner) pass3(dst []byte, x byte) []byte {
	c.q = append(c.q, x)
	return c.drain3(dst, false)
}

// drain3 emits the queued bytes whose fate is known. At end, a space whose
// following bytes are missing stays.
func (c *cleaner) drain3(dst []byte, end bool) []byte {
	q := c.q
	for len(q) > 0 {
		if q[0] != ' ' {
			dst = append(dst, q[0])
			q = q[1:]
			continue
		}
		drop, known := spaceBeforeContraction(q[1:], end)
		if !known {
			break
		}
		if !drop {
			dst = append(dst, ' ')
		}
		q = q[1:]
	}
	c.q = append(c.q[:0], q...)
	return dst
}

// spaceBeforeContraction decides whether a space followed by rest is dropped
// (it precedes 's, 'm, 're or 've). known is false when rest is too short to
// tell and more may come.
func spaceBeforeContraction(rest []byte, end bool) (drop, known bool) {
	if len(rest) < 2 {
		return false, end || (len(rest) == 1 && rest[0] != '\'')
	}
	if rest[0] != '\'' {
		return false, true
	}
	switch rest[1] {
	case 's', 'm':
		return true, true
	case 'r', 'v':
		if len(rest) < 3 {
			return false, end
		}
		return rest[2] == 'e', true
	}
	return false, true
}
