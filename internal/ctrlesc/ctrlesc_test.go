package ctrlesc

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain ASCII", "step 10 loss 0.25\n", "step 10 loss 0.25\n"},
		{"plain UTF-8 kept", "épოქა 训练 ✓ 🚀 \uFFFD\n", "épოქა 训练 ✓ 🚀 \uFFFD\n"},
		{"newline and tab kept", "a\tb\n\nc", "a\tb\n\nc"},
		{"backslash kept", `C:\x1b\path`, `C:\x1b\path`},
		{"OSC 0 title (BEL)", "\x1b]0;pwned\x07hello", `\x1b]0;pwned\x07hello`},
		{"OSC 0 title (ST)", "\x1b]0;pwned\x1b\\", `\x1b]0;pwned\x1b\`},
		{"OSC 52 clipboard", "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07", `\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07`},
		{"CSI cursor up and erase", "ok\x1b[2A\x1b[2K\x1b[1;1H", `ok\x1b[2A\x1b[2K\x1b[1;1H`},
		{"BEL", "ding\a", `ding\x07`},
		{"NUL, BS, VT, FF", "\x00\b\v\f", `\x00\x08\x0b\x0c`},
		{"CR", "10%\r20%\r\n", `10%\r20%\r` + "\n"},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1 CSI as a character", "\u009b31mred", `\u009b31mred`},
		{"C1 OSC and ST as characters", "\u009d0;t\u009c", `\u009d0;t\u009c`},
		{"C1 CSI as a lone byte", "\x9b31mred", `\x9b31mred`},
		{"invalid UTF-8", "a\xffb\xc3(\xe2\x82", `a\xffb\xc3(\xe2\x82`},
		{"overlong encoding", "\xc0\xaf", `\xc0\xaf`},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Escape(tc.in)
			if got != tc.want {
				t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Escape(%q) = %q: not valid UTF-8", tc.in, got)
			}
			for _, r := range got {
				if unicode.IsControl(r) && r != '\n' && r != '\t' {
					t.Errorf("Escape(%q) = %q: holds control character %U", tc.in, got, r)
				}
			}
		})
	}
}

func TestIncompleteTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want int
	}{
		{"empty", nil, 0},
		{"ASCII", []byte("abc"), 0},
		{"whole 2-byte", []byte("é"), 0},
		{"whole 4-byte", []byte("🚀"), 0},
		{"1 of 2", []byte("a\xc3"), 1},
		{"1 of 3", []byte("a\xe8"), 1},
		{"2 of 3", []byte("a\xe8\xae"), 2},
		{"3 of 4", []byte("a\xf0\x9f\x9a"), 3},
		{"2 of 4", []byte("\xf0\x9f"), 2},
		{"lone continuation", []byte("a\x80"), 0},
		{"byte that starts nothing", []byte("a\xff"), 0},
		{"invalid second byte", []byte("a\xe0\x80"), 0},
		{"surrogate start", []byte("a\xed\xa0"), 0},
		{"C1 lead alone", []byte("a\xc2"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IncompleteTail(tc.in); got != tc.want {
				t.Errorf("IncompleteTail(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}
