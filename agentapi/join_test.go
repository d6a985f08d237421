package agentapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestHostExists(t *testing.T) {
	exists := &cloud.Error{Code: cloud.Conflict, Message: "m", Details: map[string]any{"reason": ReasonHostExists, "host": "h-1"}}
	for _, c := range []struct {
		desc string
		err  error
		host string
		ok   bool
	}{
		{"the refusal", exists, "h-1", true},
		{"the refusal, wrapped", fmt.Errorf("join: %w", exists), "h-1", true},
		{"no error", nil, "", false},
		{"another conflict", &cloud.Error{Code: cloud.Conflict, Details: map[string]any{"reason": ReasonJoinTokenUsedUp}}, "", false},
		{"another code with the reason", &cloud.Error{Code: cloud.Invalid, Details: map[string]any{"reason": ReasonHostExists, "host": "h-1"}}, "", false},
		{"no host named", &cloud.Error{Code: cloud.Conflict, Details: map[string]any{"reason": ReasonHostExists}}, "", false},
		{"a plain error", errors.New("host_exists"), "", false},
	} {
		if host, ok := HostExists(c.err); host != c.host || ok != c.ok {
			t.Errorf("%s: %q, %v; want %q, %v", c.desc, host, ok, c.host, c.ok)
		}
	}
}
