package edge

import (
	"errors"

	"github.com/bulkhead-ai/bulkhead/models/chat"
)

// chatError maps a chat template's refusal or failure to the table, or
// returns nil for other errors. A template that raises refuses with its own
// message (Gemma's "System role not supported"); a conversation a template
// cannot take is invalid input too.
func chatError(err error) *Error {
	var te *chat.TemplateError
	switch {
	case errors.As(err, &te):
		return &Error{Row: rowInvalidInput, Message: te.Message, Param: "messages", Err: err}
	case errors.Is(err, chat.ErrNoReasoningSwitch), errors.Is(err, chat.ErrReasoningEffort):
		return &Error{Row: rowInvalidInput, Message: "reasoning_effort: " + err.Error(), Param: "reasoning_effort", Err: err}
	case errors.Is(err, chat.ErrInvalidTool):
		return &Error{Row: rowInvalidInput, Message: "tools: " + err.Error(), Param: "tools", Err: err}
	case errors.Is(err, chat.ErrInvalidRole), errors.Is(err, chat.ErrNoMessages), errors.Is(err, chat.ErrInvalidInput):
		return &Error{Row: rowInvalidInput, Message: "messages: " + err.Error(), Param: "messages", Err: err}
	case errors.Is(err, chat.ErrRender):
		return &Error{Row: rowInvalidInput, Message: "the model's chat template cannot render this conversation: " + err.Error(), Param: "messages", Err: err}
	}
	return nil
}
