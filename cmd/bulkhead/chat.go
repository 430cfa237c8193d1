package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
)

// chatCommands are the subcommands of `bulkhead chat`.
func chatCommands() []command {
	return []command{
		{"render", "render a conversation with a model's chat template, exactly as the edge does", runChatRender},
	}
}

func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		for _, c := range chatCommands() {
			if c.name == args[0] {
				return c.run(ctx, args[1:], stdout, stderr)
			}
		}
	}
	msg := "bulkhead chat render ..."
	for _, c := range chatCommands() {
		msg += fmt.Sprintf("\n  %-6s %s", c.name, c.summary)
	}
	return fmt.Errorf("%w: %s", errUsage, msg)
}

// runChatRender prints the text a chat template renders for the template
// variables in --input: messages, tools, add_generation_prompt, bos_token,
// eos_token, any other variable the template reads, and now (RFC 3339, for
// strftime_now). With --model, bos_token and eos_token default to the
// model's. A template that raises exits 1 with its message.
func runChatRender(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("chat render", stderr)
	model := fs.String("model", "", "GGUF file whose tokenizer.chat_template renders (a full model or a vocab-only file)")
	tmplPath := fs.String("template", "", "a chat template file (Jinja) instead of --model")
	input := fs.String("input", "", `JSON file of template variables, e.g. {"messages":[...],"add_generation_prompt":true}`)
	asJSON := fs.Bool("json", false, `print {"text":"..."}`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "input"); err != nil {
		return err
	}
	if (*model == "") == (*tmplPath == "") {
		return fmt.Errorf("%w: give exactly one of --model and --template", errUsage)
	}
	vars, err := os.ReadFile(*input)
	if err != nil {
		return err
	}
	var src string
	if *model != "" {
		tok, err := loadTokenizer(*model)
		if err != nil {
			return err
		}
		if src = tok.ChatTemplate(); src == "" {
			return fmt.Errorf("%s has no tokenizer.chat_template", *model)
		}
		if vars, err = withDefaults(vars, map[string]string{
			"bos_token": tok.Piece(tok.BOS()), "eos_token": tok.Piece(tok.EOS()),
		}); err != nil {
			return fmt.Errorf("%s: %w", *input, err)
		}
	} else {
		b, err := os.ReadFile(*tmplPath)
		if err != nil {
			return err
		}
		src = string(b)
	}
	tmpl, err := chat.Compile(src, chat.Config{})
	if err != nil {
		return err
	}
	text, err := tmpl.RenderVars(ctx, vars)
	var te *chat.TemplateError
	if errors.As(err, &te) {
		return fmt.Errorf("the template refused: %s", te.Message)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Text string `json:"text"`
		}{text})
	}
	_, err = io.WriteString(stdout, text)
	return err
}

func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tokenizer.FromGGUF(f)
}

// withDefaults adds string variables the JSON object vars does not set.
func withDefaults(vars []byte, defs map[string]string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(vars, &obj); err != nil {
		return nil, fmt.Errorf("template variables must be a JSON object: %w", err)
	}
	var extra bytes.Buffer
	for _, k := range []string{"bos_token", "eos_token"} {
		if _, ok := obj[k]; ok || defs[k] == "" {
			continue
		}
		v, _ := json.Marshal(defs[k])
		fmt.Fprintf(&extra, "%q:%s,", k, v)
	}
	if extra.Len() == 0 {
		return vars, nil
	}
	// Prepend, keeping the caller's keys and their order.
	rest := bytes.TrimLeft(bytes.TrimSpace(vars)[1:], " \t\r\n")
	head := extra.Bytes()
	if bytes.HasPrefix(rest, []byte("}")) {
		head = head[:len(head)-1] // no trailing comma before an empty object's end
	}
	return append(append([]byte("{"), head...), rest...), nil
}
