package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestLogTailEscapes: an instance whose workload wrote escape sequences
// (window title, clipboard, cursor moves, bell, C1 CSI, CR, invalid
// UTF-8) gets a page and a log tail that hold none of those bytes, the
// tail showing them visibly instead; a character cut between two chunks
// is shown whole.
func TestLogTailEscapes(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	in := w.acmeIn.ID
	appendLog := func(data string) {
		ctx := context.Background()
		if err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
			_, err := tx.AppendLog(ctx, in, []byte(data), 1<<20)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	b := w.browser(t)
	b.login(w.acme.Token)
	type chunk struct {
		Data  string `json:"data"`
		Start int64  `json:"start"`
		Next  int64  `json:"next"`
	}
	tail := func(offset int64) chunk {
		t.Helper()
		p := b.get("/instances/" + in + "/log?offset=" + strconv.FormatInt(offset, 10))
		if p.status != http.StatusOK {
			t.Fatalf("log: %d %s", p.status, p.body)
		}
		var c chunk
		if err := json.Unmarshal([]byte(p.body), &c); err != nil {
			t.Fatalf("log: %v: %s", err, p.body)
		}
		for _, r := range c.Data {
			if unicode.IsControl(r) && r != '\n' && r != '\t' {
				t.Errorf("log chunk holds control character %U: %q", r, c.Data)
			}
		}
		return c
	}

	var offset int64
	for _, tc := range []struct {
		name, write, want string
	}{
		{"OSC 0 title", "\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"OSC 52 clipboard", "\x1b]52;c;cm0gLXJmIH4=\x1b\\", `\x1b]52;c;cm0gLXJmIH4=\x1b\`},
		{"CSI cursor moves", "\x1b[2A\x1b[1;1H\x1b[2K", `\x1b[2A\x1b[1;1H\x1b[2K`},
		{"BEL", "\a", `\x07`},
		{"C1 CSI character", "\u009b31m", `\u009b31m`},
		{"C1 CSI byte", "\x9b31m", `\x9b31m`},
		{"CR", "50%\r100%\n", `50%\r100%` + "\n"},
		{"invalid UTF-8", "a\xffb\xc3(", `a\xffb\xc3(`},
		{"plain text kept", "epoch 1 loss 0.25 ✓ 训练\tok\n", "epoch 1 loss 0.25 ✓ 训练\tok\n"},
		{"a character cut short waits", "done \xe2\x9c", "done "},
		{"and is shown whole", "\x93\n", "✓\n"},
	} {
		appendLog(tc.write)
		c := tail(offset)
		if c.Data != tc.want {
			t.Errorf("%s: tail %q, want %q", tc.name, c.Data, tc.want)
		}
		offset = c.Next
	}

	page := b.get("/instances/" + in)
	if page.status != http.StatusOK {
		t.Fatalf("instance page: %d", page.status)
	}
	for _, r := range page.body {
		if r == unicode.ReplacementChar || unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			t.Errorf("instance page holds %U", r)
		}
	}
	if strings.Contains(page.body, "owned") {
		t.Errorf("instance page shows the log's text raw")
	}
}
