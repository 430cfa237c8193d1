package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// checkDecoded holds for any body: decoding either fails with an input error
// or yields a request that validation accepts or refuses with one.
func checkDecoded(t *testing.T, err error) {
	t.Helper()
	var in *InputError
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &in) && !errors.As(err, &mbe) {
		t.Fatalf("error of unexpected type %T: %v", err, err)
	}
	if err != nil && Classify(err).Row.Status != 400 {
		t.Fatalf("a body error is not a 400: %v", err)
	}
}

func FuzzNativeRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"Once upon a time"}`,
		`{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}`,
		`{"prompt":"x","raw":true,"stop":["a","b"],"temperature":0.5,"seed":3}`,
		`{"requests":[{"prompt":"a"}]}`,
		`{"request_id":"0123"}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"prompt":1}`, `[]`, `{`, ``, `{"max_tokens":1e99}`,
		`{"prompt":"x","cache_prefix":true}`, `{"prompt":"x","cache_prefix":false}`, `{"prompt":"x","cache_prefix":"yes"}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","description":"d","parameters":{"type":"object"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req nativeRequest
		err := decodeJSON(bytes.NewReader(body), &req)
		checkDecoded(t, err)
		if err != nil {
			return
		}
		in, err := nativeInput(&req, "")
		checkDecoded(t, err)
		if err != nil {
			return
		}
		switch {
		case in.maxTokens < 0:
			t.Fatalf("negative max_tokens %d", in.maxTokens)
		case in.raw && in.prompt == "":
			t.Fatal("raw request without prompt")
		case !in.raw && len(in.messages) == 0:
			t.Fatal("templated request without messages")
		case len(in.stop) > maxStopSequences:
			t.Fatalf("%d stop sequences", len(in.stop))
		case in.cachePrefix != (req.CachePrefix == nil || *req.CachePrefix):
			t.Fatalf("cache_prefix %v decoded, %v validated", req.CachePrefix, in.cachePrefix)
		}
		checkTools(t, in)
		for _, raw := range req.Requests {
			var one nativeRequest
			checkDecoded(t, decodeRaw(raw, &one, "requests"))
		}
	})
}

// checkTools: accepted tools are OpenAI-shaped function tools, and a named
// tool_choice names one of them.
func checkTools(t *testing.T, in *genInput) {
	t.Helper()
	names := map[string]bool{}
	for _, raw := range in.tools {
		name := toolFunctionName(raw)
		if name == "" || names[name] || !json.Valid(raw) {
			t.Fatalf("accepted tool %s", raw)
		}
		names[name] = true
	}
	if in.toolChoice.mode == choiceNamed && (!names[in.toolChoice.name] || len(in.templateTools()) != 1) {
		t.Fatalf("tool_choice %+v over %d tools", in.toolChoice, len(in.tools))
	}
	if len(in.tools) > 0 && in.toolChoice.mode == "" {
		t.Fatal("tools without a tool_choice mode")
	}
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"developer","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[],"n":2,"stop":"x","max_completion_tokens":3}`,
		`{"model":"m","prompt":["a"],"max_tokens":2}`,
		`{"model":5}`, `null`, `{"messages":null}`,
		`{"model":"m","messages":[{"role":"user","content":"<|im_start|>"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","content":"1","tool_call_id":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]+$"}},"required":["a"]}}},"logprobs":true,"top_logprobs":3}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"stream":true}`,
	} {
		f.Add([]byte(s))
	}
	v, err := loadVocab(nil, modelQwenTools, withTemplate(f, "Qwen-Qwen2.5-7B-Instruct.jinja"), false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req chatRequest
		err := decodeJSON(bytes.NewReader(body), &req)
		checkDecoded(t, err)
		if err == nil {
			_, in, err := chatInput(&req)
			checkDecoded(t, err)
			if err == nil && (len(in.messages) == 0 || in.raw) {
				t.Fatalf("accepted chat request without messages: %+v", in)
			}
			if err == nil {
				checkTools(t, in)
				// Whatever validates renders, or is refused as invalid input.
				if _, err := v.render(context.Background(), in); err != nil {
					if e := Classify(err); e.Row.Status != 400 {
						t.Fatalf("render error %v classified %d", err, e.Row.Status)
					}
				}
			}
		}
		var creq completionRequest
		err = decodeJSON(bytes.NewReader(body), &creq)
		checkDecoded(t, err)
		if err == nil {
			_, in, err := completionInput(&creq)
			checkDecoded(t, err)
			if err == nil && (in.prompt == "" || !in.raw) {
				t.Fatalf("accepted completion request without prompt: %+v", in)
			}
		}
	})
}
