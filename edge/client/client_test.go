package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// canned serves a fixed status and body for every request and records the
// last request's path and authorization.
func canned(t *testing.T, status int, ctype, body string) (*httptest.Server, *string) {
	t.Helper()
	var seen string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Authorization")
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestRunAndErrors(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		body       string
		wantText   string
		wantErr    *APIError
		opts       []Option
		wantSeenAs string
	}{
		{"ok", 200, `{"result":{"response":"hi","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}},"success":true,"errors":[],"messages":[]}`,
			"hi", nil, nil, "POST /ai/run/@cf/m/x Bearer tok"},
		{"account", 200, `{"result":{"response":"hi"},"success":true,"errors":[],"messages":[]}`,
			"hi", nil, []Option{WithAccount("acme")}, "POST /client/v4/accounts/acme/ai/run/@cf/m/x Bearer tok"},
		{"native error", 413, `{"result":null,"success":false,"errors":[{"code":3006,"message":"prompt is 9 tokens"}],"messages":[]}`,
			"", &APIError{Status: 413, Code: 3006, Message: "prompt is 9 tokens"}, nil, ""},
		{"openai error", 404, `{"error":{"message":"no","type":"invalid_request_error","param":"model","code":"model_not_found"}}`,
			"", &APIError{Status: 404, Type: "invalid_request_error", OpenAI: "model_not_found", Message: "no"}, nil, ""},
		{"plain text error", 502, `bad gateway`, "", &APIError{Status: 502, Message: "bad gateway"}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, seen := canned(t, c.status, "application/json", c.body)
			cl := New(srv.URL+"/", "tok", c.opts...)
			res, err := cl.Run(context.Background(), "@cf/m/x", RunRequest{Prompt: "p"})
			if c.wantErr != nil {
				var ae *APIError
				if !errors.As(err, &ae) || *ae != *c.wantErr {
					t.Fatalf("err %#v, want %#v", err, c.wantErr)
				}
				return
			}
			if err != nil || res.Response != c.wantText {
				t.Fatalf("res %+v err %v", res, err)
			}
			if *seen != c.wantSeenAs {
				t.Errorf("request %q, want %q", *seen, c.wantSeenAs)
			}
		})
	}
}

func TestStream(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		want    []string
		wantErr error
		usage   int
	}{
		{"done", "data: {\"response\":\"a\"}\n\ndata: {\"response\":\"b\"}\n\ndata: {\"response\":\"\",\"usage\":{\"total_tokens\":5}}\n\ndata: [DONE]\n\n",
			[]string{"a", "b"}, io.EOF, 5},
		{"cut", "data: {\"response\":\"a\"}\n\n", []string{"a"}, ErrStreamCut, 0},
		{"cut mid event", "data: {\"response\":\"a\"}\n\ndata: {\"resp", []string{"a"}, ErrStreamCut, 0},
		{"error event", "data: {\"response\":\"a\"}\n\nevent: error\ndata: {\"result\":null,\"success\":false,\"errors\":[{\"code\":3007,\"message\":\"late\"}],\"messages\":[]}\n\n",
			[]string{"a"}, &APIError{Code: 3007, Message: "late"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := canned(t, 200, "text/event-stream", c.body)
			s, err := New(srv.URL, "tok").RunStream(context.Background(), "m", RunRequest{Prompt: "p"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got []string
			for {
				text, err := s.Next()
				if err != nil {
					var ae, want *APIError
					if errors.As(c.wantErr, &want) {
						if !errors.As(err, &ae) || *ae != *want {
							t.Errorf("err %v, want %v", err, want)
						}
					} else if !errors.Is(err, c.wantErr) {
						t.Errorf("err %v, want %v", err, c.wantErr)
					}
					break
				}
				got = append(got, text)
			}
			if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
				t.Errorf("chunks %q, want %q", got, c.want)
			}
			if c.usage != 0 && (s.Usage() == nil || s.Usage().TotalTokens != c.usage) {
				t.Errorf("usage %+v", s.Usage())
			}
		})
	}
}
