package httpapi

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// redoclyProblem is one problem of `redocly lint --format=json`.
type redoclyProblem struct {
	RuleID   string `json:"ruleId"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Location []struct {
		Pointer string `json:"pointer"`
	} `json:"location"`
}

// TestOpenAPILint runs a third-party linter, Redocly CLI with its
// recommended rules (.ci/tools.sh installs the version it pins), over the
// document, and fails on every error and warning it reports but one kind:
// operation-2xx-response on a WebSocket route. Such a route answers 101
// Switching Protocols when it succeeds, never a 2XX, and the document says
// so; the test checks that each one it lets pass does document a 101.
// Without redocly on PATH it skips, unless CI is set.
func TestOpenAPILint(t *testing.T) {
	path, err := exec.LookPath("redocly")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redocly is not on PATH and CI is set: .ci/tools.sh installs it (npm install @redocly/cli)")
		}
		t.Skip("redocly is not on PATH: the OpenAPI document is not linted (CI lints it)")
	}
	dir := t.TempDir()
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, openAPIDoc, 0o644); err != nil {
		t.Fatal(err)
	}
	// The recommended rules, and nothing read from the checkout's or the
	// user's configuration.
	if err := os.WriteFile(filepath.Join(dir, "redocly.yaml"), []byte("extends:\n  - recommended\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "lint", "--format=json", "--config", filepath.Join(dir, "redocly.yaml"), doc)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_UPDATE_NOTIFIER=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("redocly lint ran over 2 minutes\n%s", stderr.String())
	}
	// It exits 1 when it finds errors: the report says what they are.
	var report struct {
		Problems []redoclyProblem `json:"problems"`
	}
	if jerr := json.Unmarshal([]byte(stdout.String()), &report); jerr != nil {
		t.Fatalf("redocly lint: %v (exit: %v)\nstdout: %.2000s\nstderr: %.2000s", jerr, err, stdout.String(), stderr.String())
	}
	var d struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &d); err != nil {
		t.Fatal(err)
	}
	websockets := 0
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		if p.RuleID == "operation-2xx-response" && upgrades(d.Paths, where) {
			websockets++
			continue
		}
		t.Errorf("redocly %s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if websockets == 0 {
		// The document has WebSocket routes (exec, port-forward, files):
		// a run that reports none of them did not lint what it should.
		t.Errorf("redocly reported no WebSocket route without a 2XX; its output:\n%.2000s", stdout.String())
	}
}

// upgrades reports whether the JSON pointer names the responses of an
// operation (#/paths/{path}/{method}/responses) that documents a 101.
func upgrades(paths map[string]map[string]struct {
	Responses map[string]json.RawMessage `json:"responses"`
}, pointer string) bool {
	parts := strings.Split(strings.TrimPrefix(pointer, "#/"), "/")
	if len(parts) != 4 || parts[0] != "paths" || parts[3] != "responses" {
		return false
	}
	path := strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[1])
	op, ok := paths[path][parts[2]]
	if !ok {
		return false
	}
	_, ok = op.Responses["101"]
	return ok
}
