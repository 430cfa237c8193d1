package chat

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

var (
	// ErrUnknownTemplate is returned for an empty chat template, one of no
	// supported family, an unknown name, and the zero Template.
	ErrUnknownTemplate = errors.New("chat: unknown chat template")
	// ErrNoMessages is returned when there is nothing to render.
	ErrNoMessages = errors.New("chat: no messages")
	// ErrInvalidRole is returned for a role other than system, user or
	// assistant.
	ErrInvalidRole = errors.New("chat: invalid role")
	// ErrRoleOrder is returned when a family cannot express the order of the
	// roles (Llama 2 needs an optional system message first, then user and
	// assistant turns alternating, starting with user).
	ErrRoleOrder = errors.New("chat: roles out of order")
)

// Roles a Message may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // system, user or assistant
	Content string
}

type family int

const (
	familyNone family = iota
	familyLlama2
	familyLlama3
	familyLlama31
	familyChatML
	familyZephyr
)

var familyNames = map[family]string{
	familyLlama2:  "llama2",
	familyLlama3:  "llama3",
	familyLlama31: "llama3.1",
	familyChatML:  "chatml",
	familyZephyr:  "zephyr",
}

// Llama31Date is the date Llama 3.1's template writes when the caller passes
// none ("Today Date: 26 Jul 2024").
const Llama31Date = "26 Jul 2024"

// Template renders conversations for one family. The zero value renders
// nothing and returns ErrUnknownTemplate. Templates are values and safe for
// concurrent use.
type Template struct {
	family        family
	defaultSystem string // chatml: system message used when none is given
	eos           string // zephyr: end-of-turn text
}

// Detect picks the family of a GGUF tokenizer.chat_template by its markers:
// "<|start_header_id|>" is Llama 3 (Llama 3.1 when it writes "Cutting Knowledge
// Date"), "<|im_start|>" is ChatML, "[INST]" with "<<SYS>>" is Llama 2, and
// "<|user|>" with an end of sequence ("</s>", eos_token or "<|endoftext|>")
// and without Phi-3's "<|end|>" is Zephyr. A ChatML template that writes a
// fixed system message when the conversation has none (Qwen2, SmolLM2) keeps
// that message. Anything else, including an empty string and Mistral's [INST]
// templates without <<SYS>>, is ErrUnknownTemplate: callers pick their own
// fallback.
func Detect(chatTemplate string) (Template, error) {
	t := chatTemplate
	switch {
	case strings.TrimSpace(t) == "":
		return Template{}, fmt.Errorf("%w: empty", ErrUnknownTemplate)
	case strings.Contains(t, "<|start_header_id|>"):
		if strings.Contains(t, "Cutting Knowledge Date") {
			return Template{family: familyLlama31}, nil
		}
		return Template{family: familyLlama3}, nil
	case strings.Contains(t, "<|im_start|>"):
		return Template{family: familyChatML, defaultSystem: chatMLDefaultSystem(t)}, nil
	case strings.Contains(t, "[INST]"):
		if strings.Contains(t, "<<SYS>>") {
			return Template{family: familyLlama2}, nil
		}
		return Template{}, fmt.Errorf("%w: [INST] template without <<SYS>> (Mistral style) is not Llama 2", ErrUnknownTemplate)
	case strings.Contains(t, "<|user|>") && !strings.Contains(t, "<|end|>"):
		switch {
		case strings.Contains(t, "</s>") || strings.Contains(t, "eos_token"):
			return Template{family: familyZephyr, eos: "</s>"}, nil
		case strings.Contains(t, "<|endoftext|>"):
			return Template{family: familyZephyr, eos: "<|endoftext|>"}, nil
		}
	}
	return Template{}, fmt.Errorf("%w: no known family's markers", ErrUnknownTemplate)
}

// ByName returns the canonical template of a family: "llama2", "llama3",
// "llama3.1", "chatml" (without a default system message) or "zephyr".
func ByName(name string) (Template, error) {
	switch name {
	case "llama2":
		return Template{family: familyLlama2}, nil
	case "llama3":
		return Template{family: familyLlama3}, nil
	case "llama3.1":
		return Template{family: familyLlama31}, nil
	case "chatml":
		return Template{family: familyChatML}, nil
	case "zephyr":
		return Template{family: familyZephyr, eos: "</s>"}, nil
	}
	return Template{}, fmt.Errorf("%w: %q", ErrUnknownTemplate, name)
}

// Name returns the family name ByName accepts, or "" for the zero Template.
func (t Template) Name() string { return familyNames[t.family] }

// DefaultSystem returns the system message a ChatML template adds when the
// conversation does not start with one, or "".
func (t Template) DefaultSystem() string { return t.defaultSystem }

// AddsBOS reports whether rendered text already starts with the model's BOS
// token written as text ("<s>" for Llama 2, "<|begin_of_text|>" for Llama 3),
// so the caller must not add another when tokenizing.
func (t Template) AddsBOS() bool {
	switch t.family {
	case familyLlama2, familyLlama3, familyLlama31:
		return true
	}
	return false
}

// Render writes msgs as the prompt text, ending with the opening of an
// assistant turn when addGenerationPrompt is set (Llama 2's template has no
// such opening; its prompt already ends with "[/INST]").
func (t Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	if t.family == familyNone {
		return "", fmt.Errorf("%w: zero Template", ErrUnknownTemplate)
	}
	if len(msgs) == 0 {
		return "", ErrNoMessages
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return "", fmt.Errorf("%w: message %d has role %q", ErrInvalidRole, i, m.Role)
		}
	}
	var b strings.Builder
	var err error
	switch t.family {
	case familyLlama2:
		err = renderLlama2(&b, msgs)
	case familyLlama3:
		renderLlama3(&b, msgs, addGenerationPrompt)
	case familyLlama31:
		renderLlama31(&b, msgs, addGenerationPrompt)
	case familyChatML:
		t.renderChatML(&b, msgs, addGenerationPrompt)
	case familyZephyr:
		t.renderZephyr(&b, msgs, addGenerationPrompt)
	}
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// renderLlama2 follows meta-llama/Llama-2-7b-chat-hf: the system message is
// folded into the first user turn, each user turn is "<s>[INST] ... [/INST]",
// each assistant turn " ... </s>", and contents are stripped.
func renderLlama2(b *strings.Builder, msgs []Message) error {
	system, hasSystem := "", false
	if msgs[0].Role == RoleSystem {
		system, hasSystem = msgs[0].Content, true
		msgs = msgs[1:]
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%w: llama2 needs a user message after the system message", ErrRoleOrder)
	}
	for i, m := range msgs {
		want := RoleUser
		if i%2 == 1 {
			want = RoleAssistant
		}
		if m.Role != want {
			return fmt.Errorf("%w: llama2 wants %s at turn %d (after an optional first system message), got %s",
				ErrRoleOrder, want, i, m.Role)
		}
		content := m.Content
		if i == 0 && hasSystem {
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
		}
		if m.Role == RoleUser {
			b.WriteString("<s>[INST] ")
			b.WriteString(strip(content))
			b.WriteString(" [/INST]")
		} else {
			b.WriteString(" ")
			b.WriteString(strip(content))
			b.WriteString(" </s>")
		}
	}
	return nil
}

// renderLlama3 follows meta-llama/Meta-Llama-3-8B-Instruct.
func renderLlama3(b *strings.Builder, msgs []Message, gen bool) {
	b.WriteString("<|begin_of_text|>")
	for _, m := range msgs {
		llama3Turn(b, m.Role, strip(m.Content))
	}
	if gen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
}

// renderLlama31 follows meta-llama/Llama-3.1-8B-Instruct (and 3.3) without
// tools: a system turn is always written, holding the knowledge cutoff, the
// template's default date and the (stripped) system message if the
// conversation starts with one.
func renderLlama31(b *strings.Builder, msgs []Message, gen bool) {
	system := ""
	if msgs[0].Role == RoleSystem {
		system = strip(msgs[0].Content)
		msgs = msgs[1:]
	}
	b.WriteString("<|begin_of_text|>")
	llama3Turn(b, RoleSystem, "Cutting Knowledge Date: December 2023\nToday Date: "+Llama31Date+"\n\n"+system)
	for _, m := range msgs {
		llama3Turn(b, m.Role, strip(m.Content))
	}
	if gen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
}

func llama3Turn(b *strings.Builder, role, content string) {
	b.WriteString("<|start_header_id|>")
	b.WriteString(role)
	b.WriteString("<|end_header_id|>\n\n")
	b.WriteString(content)
	b.WriteString("<|eot_id|>")
}

// renderChatML writes "<|im_start|>{role}\n{content}<|im_end|>\n" per turn,
// contents untouched.
func (t Template) renderChatML(b *strings.Builder, msgs []Message, gen bool) {
	if t.defaultSystem != "" && msgs[0].Role != RoleSystem {
		chatMLTurn(b, RoleSystem, t.defaultSystem)
	}
	for _, m := range msgs {
		chatMLTurn(b, m.Role, m.Content)
	}
	if gen {
		b.WriteString("<|im_start|>assistant\n")
	}
}

func chatMLTurn(b *strings.Builder, role, content string) {
	b.WriteString("<|im_start|>")
	b.WriteString(role)
	b.WriteString("\n")
	b.WriteString(content)
	b.WriteString("<|im_end|>\n")
}

// renderZephyr follows HuggingFaceH4/zephyr-7b-beta as rendered with
// trim_blocks: "<|{role}|>\n{content}{eos}\n" per turn, contents untouched.
func (t Template) renderZephyr(b *strings.Builder, msgs []Message, gen bool) {
	for _, m := range msgs {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content)
		b.WriteString(t.eos)
		b.WriteString("\n")
	}
	if gen {
		b.WriteString("<|assistant|>\n")
	}
}

// strip removes leading and trailing whitespace as Python's str.strip() and
// Jinja's trim filter do: Go's Unicode White_Space plus the ASCII separators
// U+001C..U+001F, which Python also counts as whitespace.
func strip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
	})
}
