// Package ctrlesc makes the control characters in text visible, so that
// output a workload wrote can be shown to a reader (on a terminal, in the
// console) without any escape sequence in it acting there: no window
// title set (OSC 0), no clipboard written (OSC 52), no cursor moved (CSI),
// no bell.
//
// Newline and tab are kept. A carriage return reads `\r`; every other C0
// control character and DEL reads `\xNN` (ESC is `\x1b`); a C1 control
// character (U+0080 to U+009F) reads `\u00NN`; and a byte that is not
// part of valid UTF-8 reads `\xNN`, so that a terminal that takes a lone
// 0x9b for CSI sees none either. Everything else, any printable UTF-8
// text, is kept as it is.
package ctrlesc

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s with its control characters and invalid UTF-8 written
// visibly, as the package describes; s itself when it holds none.
func Escape(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		esc := ""
		switch {
		case r == utf8.RuneError && size == 1:
			esc = fmt.Sprintf(`\x%02x`, s[i])
		case r == '\n' || r == '\t':
		case r == '\r':
			esc = `\r`
		case r < 0x20 || r == 0x7f:
			esc = fmt.Sprintf(`\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			esc = fmt.Sprintf(`\u%04x`, r)
		}
		if esc != "" {
			if b.Len() == 0 {
				b.Grow(len(s) + 16)
			}
			b.WriteString(s[done:i])
			b.WriteString(esc)
			done = i + size
		}
		i += size
	}
	if b.Len() == 0 {
		return s // nothing to escape
	}
	b.WriteString(s[done:])
	return b.String()
}

// IncompleteTail returns how many bytes at the end of b (at most 3) are
// the start of a UTF-8 sequence that b cut short, 0 when b ends on a
// whole character or on bytes that no continuation could make valid. A
// reader of a log in pieces keeps those bytes for the next piece, so that
// a character split between two pieces is not shown as two invalid bytes.
func IncompleteTail(b []byte) int {
	for n := 1; n < utf8.UTFMax && n <= len(b); n++ {
		c := b[len(b)-n]
		if !utf8.RuneStart(c) {
			continue // a continuation byte: look further back
		}
		// ASCII or a leading byte: pending only when it leads a sequence
		// longer than what is there, valid as far as it goes.
		if seqLen(c) > n && validPrefix(b[len(b)-n:]) {
			return n
		}
		return 0
	}
	return 0
}

// seqLen is the length of the UTF-8 sequence leading byte c starts, 0 for
// a byte that starts none.
func seqLen(c byte) int {
	switch {
	case c >= 0xc2 && c <= 0xdf:
		return 2
	case c >= 0xe0 && c <= 0xef:
		return 3
	case c >= 0xf0 && c <= 0xf4:
		return 4
	}
	return 0
}

// validPrefix reports whether p, a leading byte and fewer continuation
// bytes than it needs, can still become a valid character: it pads p with
// each continuation byte in turn and decodes it.
func validPrefix(p []byte) bool {
	want := seqLen(p[0])
	buf := make([]byte, want)
	copy(buf, p)
	for c := byte(0x80); c <= 0xbf; c++ {
		for i := len(p); i < want; i++ {
			buf[i] = c
		}
		if r, size := utf8.DecodeRune(buf); r != utf8.RuneError && size == want {
			return true
		}
	}
	return false
}
