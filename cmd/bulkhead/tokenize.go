package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
)

func runTokenize(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", stderr)
	model := fs.String("model", "", "GGUF file (a full model or a vocab-only file)")
	text := fs.String("text", "", "text to tokenize")
	asJSON := fs.Bool("json", false, `print {"tokens":[...]}`)
	special := fs.Bool("parse-special", false, "treat special-token text such as <|im_start|> as those tokens")
	noBOS := fs.Bool("no-bos", false, "do not add BOS even when the model adds one")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "model", "text"); err != nil {
		return err
	}
	f, err := gguf.Open(*model)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return err
	}
	ids := tok.Encode(*text, !*noBOS, *special)
	if ids == nil {
		ids = []int32{}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Tokens []int32 `json:"tokens"`
		}{ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	_, err = fmt.Fprintln(stdout, strings.Join(parts, " "))
	return err
}
