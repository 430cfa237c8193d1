package chat

import "strings"

// chatMLDefaultSystem returns the fixed system message a ChatML template
// writes when the conversation has none, as in Qwen2's
// "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}", or ""
// when the template writes no such literal. The message must be plain text in
// one Jinja string literal; its escapes (\n, \t, \', \", \\) are decoded.
func chatMLDefaultSystem(tmpl string) string {
	const open = "<|im_start|>system"
	for rest := tmpl; ; {
		i := strings.Index(rest, open)
		if i < 0 {
			return ""
		}
		rest = rest[i+len(open):]
		var body string
		switch {
		case strings.HasPrefix(rest, "\n"):
			body = rest[1:]
		case strings.HasPrefix(rest, `\n`):
			body = rest[2:]
		default:
			continue
		}
		end := strings.Index(body, "<|im_end|>")
		if end < 0 {
			continue
		}
		if msg, ok := unescapeLiteral(body[:end]); ok && strings.TrimSpace(msg) != "" {
			return msg
		}
	}
}

// unescapeLiteral decodes the inside of a Jinja string literal. It fails on
// anything that shows the text is not one plain literal: a bare quote (the
// literal ends, as in '<|im_start|>system\n' + messages[0]['content']) or a
// template delimiter.
func unescapeLiteral(s string) (string, bool) {
	if strings.ContainsAny(s, "{}") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\'', '"':
			return "", false
		case '\\':
			if i+1 == len(s) {
				return "", false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '\\', '\'', '"':
				b.WriteByte(s[i])
			default:
				return "", false
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
