package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ErrStreamCut reports a stream that ended before its [DONE] event.
var ErrStreamCut = errors.New("client: stream ended before [DONE]")

// APIError is a refusal from the server: the HTTP status (0 for an error
// event inside a stream whose headers said 200), the numeric code
// of the edge's error table (native API) or OpenAI's error code, and the
// message.
type APIError struct {
	Status  int
	Code    int    // native error code, e.g. 3006; 0 on the OpenAI API
	Type    string // OpenAI error type; "" on the native API
	OpenAI  string // OpenAI error code, e.g. "context_length_exceeded"
	Message string
}

func (e *APIError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("bulkhead: %d (code %d): %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("bulkhead: %d (%s): %s", e.Status, e.OpenAI, e.Message)
}

// Client talks to one Bulkhead edge with one token.
type Client struct {
	base    string
	token   string
	account string
	hc      *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc instead of http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithAccount sends requests to the /client/v4/accounts/{id}/ai/ routes.
func WithAccount(id string) Option { return func(c *Client) { c.account = id } }

// New returns a client for the edge at baseURL ("http://host:port").
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// RunRequest is a native text-generation request. Zero fields are omitted.
type RunRequest struct {
	Prompt            string    `json:"prompt,omitempty"`
	Messages          []Message `json:"messages,omitempty"`
	Raw               bool      `json:"raw,omitempty"`
	MaxTokens         int       `json:"max_tokens,omitempty"`
	Temperature       *float64  `json:"temperature,omitempty"`
	TopP              *float64  `json:"top_p,omitempty"`
	TopK              int       `json:"top_k,omitempty"`
	Seed              *int64    `json:"seed,omitempty"`
	RepetitionPenalty *float64  `json:"repetition_penalty,omitempty"`
	FrequencyPenalty  *float64  `json:"frequency_penalty,omitempty"`
	PresencePenalty   *float64  `json:"presence_penalty,omitempty"`
	Stop              []string  `json:"stop,omitempty"`
	Stream            bool      `json:"stream,omitempty"`
	// Lora names one of the tenant's finetunes of the model (name or id).
	Lora string `json:"lora,omitempty"`
	// CachePrefix false keeps the request out of the tenant's prefix cache
	// (nil: the edge's default, on).
	CachePrefix *bool `json:"cache_prefix,omitempty"`
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// RunResult is a finished native generation.
type RunResult struct {
	Response string `json:"response"`
	Usage    *Usage `json:"usage,omitempty"`
}

type nativeError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type envelope struct {
	Result  json.RawMessage `json:"result"`
	Success bool            `json:"success"`
	Errors  []nativeError   `json:"errors"`
}

type openAIError struct {
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func (c *Client) prefix() string {
	if c.account == "" {
		return c.base
	}
	return c.base + "/client/v4/accounts/" + url.PathEscape(c.account)
}

func (c *Client) runURL(model string, query string) string {
	u := c.prefix() + "/ai/run/" + model
	if query != "" {
		u += "?" + query
	}
	return u
}

func (c *Client) openAIURL(route string) string {
	if c.account == "" {
		return c.base + "/v1/" + route
	}
	return c.prefix() + "/ai/v1/" + route
}

// post sends body as JSON and returns the response; a non-2xx status is an
// *APIError decoded from either error shape.
func (c *Client) post(ctx context.Context, u string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, parseError(resp.StatusCode, data)
	}
	return resp, nil
}

// parseError reads a native envelope or an OpenAI error body.
func parseError(status int, data []byte) *APIError {
	e := &APIError{Status: status}
	var env envelope
	if json.Unmarshal(data, &env) == nil && len(env.Errors) > 0 {
		e.Code, e.Message = env.Errors[0].Code, env.Errors[0].Message
		return e
	}
	var oe openAIError
	if json.Unmarshal(data, &oe) == nil && oe.Error != nil {
		e.Type, e.Message = oe.Error.Type, oe.Error.Message
		if oe.Error.Code != nil {
			e.OpenAI = *oe.Error.Code
		}
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	return e
}

// decodeResult reads a native success envelope's result into v.
func decodeResult(resp *http.Response, v any) error {
	defer resp.Body.Close()
	var env envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("client: decoding response: %w", err)
	}
	if !env.Success {
		return parseErrorFromEnvelope(resp.StatusCode, env)
	}
	return json.Unmarshal(env.Result, v)
}

func parseErrorFromEnvelope(status int, env envelope) *APIError {
	e := &APIError{Status: status, Message: "unsuccessful response"}
	if len(env.Errors) > 0 {
		e.Code, e.Message = env.Errors[0].Code, env.Errors[0].Message
	}
	return e
}

// Run generates text and returns the whole answer.
func (c *Client) Run(ctx context.Context, model string, req RunRequest) (*RunResult, error) {
	req.Stream = false
	resp, err := c.post(ctx, c.runURL(model, ""), req)
	if err != nil {
		return nil, err
	}
	var res RunResult
	if err := decodeResult(resp, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Stream reads a server-sent event stream of text chunks. Close it when done.
type Stream struct {
	body   io.ReadCloser
	r      *bufio.Reader
	openAI bool
	usage  *Usage
	done   bool
}

// RunStream starts a streaming native generation.
func (c *Client) RunStream(ctx context.Context, model string, req RunRequest) (*Stream, error) {
	req.Stream = true
	resp, err := c.post(ctx, c.runURL(model, ""), req)
	if err != nil {
		return nil, err
	}
	return &Stream{body: resp.Body, r: bufio.NewReader(resp.Body)}, nil
}

// Usage is the usage the stream reported, once Next has returned io.EOF.
func (s *Stream) Usage() *Usage { return s.usage }

// Close releases the stream; closing early tells the server to cancel.
func (s *Stream) Close() error { return s.body.Close() }

// Next returns the next text chunk, io.EOF after [DONE], an *APIError for an
// error event, and ErrStreamCut if the stream ends without [DONE].
func (s *Stream) Next() (string, error) {
	for {
		if s.done {
			return "", io.EOF
		}
		name, data, err := readEvent(s.r)
		if err == io.EOF {
			return "", ErrStreamCut
		}
		if err != nil {
			return "", err
		}
		if name == "error" {
			s.done = true
			return "", parseError(0, []byte(data))
		}
		if data == "[DONE]" {
			s.done = true
			return "", io.EOF
		}
		text, usage, err := s.decode(data)
		if err != nil {
			return "", err
		}
		if usage != nil {
			s.usage = usage
		}
		if text != "" {
			return text, nil
		}
	}
}

func (s *Stream) decode(data string) (string, *Usage, error) {
	if s.openAI {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return "", nil, fmt.Errorf("client: bad stream chunk: %w", err)
		}
		var b strings.Builder
		for _, c := range ch.Choices {
			b.WriteString(c.Delta.Content)
		}
		return b.String(), ch.Usage, nil
	}
	var ev RunResult
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return "", nil, fmt.Errorf("client: bad stream event: %w", err)
	}
	return ev.Response, ev.Usage, nil
}

// readEvent reads one server-sent event: its name (may be empty) and data.
func readEvent(r *bufio.Reader) (name, data string, err error) {
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !seen {
				return "", "", io.EOF
			}
			if err == io.EOF {
				return "", "", ErrStreamCut
			}
			return "", "", err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if seen {
				return name, data, nil
			}
		case strings.HasPrefix(line, "event:"):
			name, seen = strings.TrimSpace(strings.TrimPrefix(line, "event:")), true
		case strings.HasPrefix(line, "data:"):
			data, seen = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "), true
		}
	}
}

// AsyncStatus is the answer to a submit or a poll. Responses is set once
// Status is "done".
type AsyncStatus struct {
	Status    string          `json:"status"`
	RequestID string          `json:"request_id"`
	Model     string          `json:"model,omitempty"`
	Responses []AsyncResponse `json:"responses,omitempty"`
	Usage     *Usage          `json:"usage,omitempty"`
}

// AsyncResponse is one request of a finished batch.
type AsyncResponse struct {
	ID      int        `json:"id"`
	Success bool       `json:"success"`
	Result  *RunResult `json:"result,omitempty"`
	Finish  string     `json:"finish_reason,omitempty"`
	Errors  []struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errors,omitempty"`
}

// RunAsync queues a batch of requests and returns its request id.
func (c *Client) RunAsync(ctx context.Context, model string, reqs []RunRequest) (string, error) {
	resp, err := c.post(ctx, c.runURL(model, "queueRequest=true"), struct {
		Requests []RunRequest `json:"requests"`
	}{reqs})
	if err != nil {
		return "", err
	}
	var st AsyncStatus
	if err := decodeResult(resp, &st); err != nil {
		return "", err
	}
	return st.RequestID, nil
}

// Poll returns a batch's status, with every response once it is done.
func (c *Client) Poll(ctx context.Context, model, requestID string) (*AsyncStatus, error) {
	resp, err := c.post(ctx, c.runURL(model, ""), struct {
		RequestID string `json:"request_id"`
	}{requestID})
	if err != nil {
		return nil, err
	}
	var st AsyncStatus
	if err := decodeResult(resp, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// ChatRequest is an OpenAI chat completion request.
type ChatRequest struct {
	Model       string    `json:"model"`
	Messages    []Message `json:"messages"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
	TopP        *float64  `json:"top_p,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	Stop        []string  `json:"stop,omitempty"`
}

// ChatCompletion is OpenAI's chat completion answer.
type ChatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		Message      Message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Usage Usage `json:"usage"`
}

// ChatCompletion runs an OpenAI chat completion.
func (c *Client) ChatCompletion(ctx context.Context, req ChatRequest) (*ChatCompletion, error) {
	resp, err := c.post(ctx, c.openAIURL("chat/completions"), req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("client: decoding response: %w", err)
	}
	return &out, nil
}

// ChatCompletionStream runs a streaming OpenAI chat completion; the stream's
// Usage is filled from the include_usage chunk.
func (c *Client) ChatCompletionStream(ctx context.Context, req ChatRequest) (*Stream, error) {
	body := struct {
		ChatRequest
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}{ChatRequest: req, Stream: true}
	body.StreamOptions.IncludeUsage = true
	resp, err := c.post(ctx, c.openAIURL("chat/completions"), body)
	if err != nil {
		return nil, err
	}
	return &Stream{body: resp.Body, r: bufio.NewReader(resp.Body), openAI: true}, nil
}

// Model is one entry of the OpenAI-compatible model list.
type Model struct {
	ID            string `json:"id"`
	ContextWindow int    `json:"context_window"`
	MaxModelLen   int    `json:"max_model_len"`
}

// Models lists the models the token may use (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.openAIURL("models"), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, parseError(resp.StatusCode, data)
	}
	var out struct {
		Data []Model `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("client: decoding model list: %w", err)
	}
	return out.Data, nil
}
