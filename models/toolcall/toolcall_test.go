package toolcall

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

var weather = Call{Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`}

// cases are fixed model outputs of each format.
var cases = []struct {
	name   string
	f      Format
	output string
	want   Result
}{
	{"hermes one call", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
		Result{Calls: []Call{weather}}},
	{"hermes text then two calls", Hermes, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
		Result{Content: "Let me check.", Calls: []Call{weather, {Name: "get_time", Arguments: "{}"}}}},
	{"hermes arguments as a string", Hermes, `<tool_call>{"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}</tool_call>`,
		Result{Calls: []Call{weather}}},
	{"hermes plain answer", Hermes, "Paris is sunny, 21 °C. ☀️", Result{Content: "Paris is sunny, 21 °C. ☀️"}},
	{"hermes malformed JSON stays text", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\n</tool_call>",
		Result{Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\n</tool_call>"}},
	{"hermes no name stays text", Hermes, `<tool_call>{"arguments": {}}</tool_call>`, Result{Content: `<tool_call>{"arguments": {}}</tool_call>`}},
	{"hermes unclosed stays text", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}", Result{Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}"}},
	{"hermes arguments not an object", Hermes, `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, Result{Content: `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`}},

	{"llama3 call", Llama3, `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}`, Result{Calls: []Call{weather}}},
	{"llama3 python tag", Llama3, `<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}`, Result{Calls: []Call{weather}}},
	{"llama3 two calls", Llama3, `{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}; {"name": "get_time", "parameters": {}}`,
		Result{Calls: []Call{weather, {Name: "get_time", Arguments: "{}"}}}},
	{"llama3 plain answer", Llama3, "It is 21 °C in Paris.", Result{Content: "It is 21 °C in Paris."}},
	{"llama3 text starting with <", Llama3, "<b>bold</b> claim", Result{Content: "<b>bold</b> claim"}},
	{"llama3 malformed stays text", Llama3, `{"name": "get_weather", "parameters": {"city": }`, Result{Content: `{"name": "get_weather", "parameters": {"city": }`}},
	{"llama3 JSON that is no call stays text", Llama3, `{"answer": 42}`, Result{Content: `{"answer": 42}`}},

	{"mistral call", Mistral, `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}, "id": "abc123def"}]`,
		Result{Calls: []Call{{ID: "abc123def", Name: weather.Name, Arguments: weather.Arguments}}}},
	{"mistral text then calls", Mistral, `Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, {"name": "get_time", "arguments": {}}]`,
		Result{Content: "Sure.", Calls: []Call{weather, {Name: "get_time", Arguments: "{}"}}}},
	{"mistral plain answer", Mistral, "Bonjour ! [TOOL] non.", Result{Content: "Bonjour ! [TOOL] non."}},
	{"mistral malformed stays text", Mistral, `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}`, Result{Content: `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}`}},
	{"mistral trailing text stays text", Mistral, `[TOOL_CALLS][{"name": "f", "arguments": {}}] and more`, Result{Content: `[TOOL_CALLS][{"name": "f", "arguments": {}}] and more`}},

	{"granite call", Granite, `<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}]`, Result{Calls: []Call{weather}}},

	{"gpt-oss call", GPTOSS, `<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "c"}<|call|>`,
		Result{Reasoning: "Need weather.", Calls: []Call{weather}}},
	{"gpt-oss recipient first", GPTOSS, `<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris","unit":"c"}`,
		Result{Calls: []Call{weather}}},
	{"gpt-oss final answer", GPTOSS, `<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 21 °C.`,
		Result{Reasoning: "Easy.", Content: "It is 21 °C."}},
	{"gpt-oss malformed arguments stay text", GPTOSS, `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Par`,
		Result{Content: `{"city": "Par`}},
	{"gpt-oss without harmony", GPTOSS, "plain words", Result{Content: "plain words"}},

	{"none is text", None, `<tool_call>{"name": "f", "arguments": {}}</tool_call>`, Result{Content: `<tool_call>{"name": "f", "arguments": {}}</tool_call>`}},
}

func TestParse(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Parse(tc.f, tc.output); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// collect runs a Stream over chunks and joins what it gave back.
func collect(f Format, chunks []string) Result {
	s := NewStream(f)
	var evs []Event
	for _, c := range chunks {
		evs = append(evs, s.Push(c)...)
	}
	evs = append(evs, s.Finish()...)
	var r Result
	for _, e := range evs {
		r.Content += e.Content
		r.Reasoning += e.Reasoning
		if e.Call != nil {
			r.Calls = append(r.Calls, *e.Call)
		}
	}
	return r
}

// TestStreamEveryBoundary splits every output at every byte boundary, and
// into single bytes: the stream gives back what Parse does.
func TestStreamEveryBoundary(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i <= len(tc.output); i++ {
				if got := collect(tc.f, []string{tc.output[:i], tc.output[i:]}); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("split at %d: %+v, want %+v", i, got, tc.want)
				}
			}
			var bytes []string
			for i := range len(tc.output) {
				bytes = append(bytes, tc.output[i:i+1])
			}
			if got := collect(tc.f, bytes); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("byte by byte: %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestStreamGivesTextEarly: text before a marker is not held back.
func TestStreamGivesTextEarly(t *testing.T) {
	for _, f := range []Format{Hermes, Mistral, Llama3, None} {
		s := NewStream(f)
		evs := s.Push("The answer is 42")
		if len(evs) != 1 || evs[0].Content != "The answer is 42" {
			t.Errorf("%v: Push gave %+v, want the text at once", f, evs)
		}
	}
}

func TestDetect(t *testing.T) {
	want := map[string]Format{
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": Hermes,
		"Qwen-Qwen2.5-7B-Instruct.jinja":                    Hermes,
		"Qwen-Qwen3-0.6B.jinja":                             Hermes,
		"meta-llama-Llama-3.1-8B-Instruct.jinja":            Llama3,
		"meta-llama-Llama-3.2-3B-Instruct.jinja":            Llama3,
		"mistralai-Mistral-Nemo-Instruct-2407.jinja":        Mistral,
		"ibm-granite-granite-3.3-2B-Instruct.jinja":         Granite,
		"openai-gpt-oss-120b.jinja":                         GPTOSS,
		"google-gemma-2-2b-it.jinja":                        None,
		"microsoft-Phi-3.5-mini-instruct.jinja":             None,
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja":    None,
		"HuggingFaceTB-SmolLM3-3B.jinja":                    None,
	}
	for name, f := range want {
		b, err := os.ReadFile(refdatatest.Path(t, filepath.Join("chat/templates", name)))
		if err != nil {
			t.Fatal(err)
		}
		if got := Detect(string(b)); got != f {
			t.Errorf("Detect(%s) = %v, want %v", name, got, f)
		}
	}
}

// FuzzStream: however output is cut, the stream gives back what Parse
// does, and never a call whose arguments are not a JSON object.
func FuzzStream(f *testing.F) {
	for _, tc := range cases {
		f.Add(uint8(tc.f), tc.output, uint16(len(tc.output)/2))
	}
	f.Fuzz(func(t *testing.T, fm uint8, out string, cut uint16) {
		format := Format(fm % 6)
		want := Parse(format, out)
		i := int(cut) % (len(out) + 1)
		if got := collect(format, []string{out[:i], out[i:]}); !reflect.DeepEqual(got, want) {
			t.Fatalf("split at %d: %+v, want %+v", i, got, want)
		}
		for _, c := range want.Calls {
			if !strings.HasPrefix(c.Arguments, "{") || c.Name == "" {
				t.Fatalf("bad call %+v", c)
			}
		}
	})
}
