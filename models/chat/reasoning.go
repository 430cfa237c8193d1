package chat

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/bulkhead-ai/bulkhead/models/chat/internal/jinja"
)

// Reasoning efforts a request may ask for (OpenAI's reasoning_effort).
const (
	ReasoningNone    = "none"
	ReasoningMinimal = "minimal"
	ReasoningLow     = "low"
	ReasoningMedium  = "medium"
	ReasoningHigh    = "high"
)

// ErrNoReasoningSwitch is a reasoning effort asked of a template that has
// no thinking switch.
var ErrNoReasoningSwitch = errors.New("chat: the model's chat template has no thinking switch")

// ErrReasoningEffort is a reasoning effort that is not one of the five.
var ErrReasoningEffort = errors.New("chat: unknown reasoning effort")

// ReasoningSwitch is how a template lets a caller turn thinking on or off,
// or set its effort: the variable it reads.
type ReasoningSwitch int

// The switches chat templates have.
const (
	NoReasoningSwitch ReasoningSwitch = iota
	// EnableThinking: a boolean enable_thinking (Qwen3, SmolLM3).
	EnableThinking
	// ThinkingFlag: a boolean thinking (Granite 3.3).
	ThinkingFlag
	// ReasoningEffort: a string reasoning_effort, low/medium/high (gpt-oss).
	ReasoningEffort
)

var (
	readsEnableThinking = regexp.MustCompile(`\benable_thinking\b`)
	readsReasoning      = regexp.MustCompile(`\breasoning_effort\b`)
	readsThinking       = regexp.MustCompile(`\{%-?\s*(?:el)?if\s+(?:not\s+)?thinking\b`)
)

// detectReasoning finds the switch a template's source reads, if any.
func detectReasoning(source string) ReasoningSwitch {
	switch {
	case readsReasoning.MatchString(source):
		return ReasoningEffort
	case readsEnableThinking.MatchString(source):
		return EnableThinking
	case readsThinking.MatchString(source):
		return ThinkingFlag
	}
	return NoReasoningSwitch
}

// Reasoning is the template's thinking switch (NoReasoningSwitch: none).
func (t *Template) Reasoning() ReasoningSwitch { return t.reasoning }

// reasoningVars sets the variable of t's switch for effort ("" leaves the
// template's default): none and minimal turn a boolean switch off and the
// others on; gpt-oss's levels take low, medium and high (none and minimal
// ask for its lowest, low).
func (t *Template) reasoningVars(vars map[string]jinja.Value, effort string) error {
	if effort == "" {
		return nil
	}
	switch effort {
	case ReasoningNone, ReasoningMinimal, ReasoningLow, ReasoningMedium, ReasoningHigh:
	default:
		return fmt.Errorf("%w: %q (want none, minimal, low, medium or high)", ErrReasoningEffort, effort)
	}
	on := effort != ReasoningNone && effort != ReasoningMinimal
	switch t.reasoning {
	case EnableThinking:
		vars["enable_thinking"] = jinja.NewBool(on)
	case ThinkingFlag:
		vars["thinking"] = jinja.NewBool(on)
	case ReasoningEffort:
		if !on {
			effort = ReasoningLow
		}
		vars["reasoning_effort"] = jinja.NewString(effort)
	default:
		return ErrNoReasoningSwitch
	}
	return nil
}
