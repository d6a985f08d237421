package stack

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a template, or in the arguments bound to it.
// Line and Column are 1-based positions in the template's source; both are
// 0 when the problem is not in the source (an argument, a state), and
// Column alone is 0 when the YAML parser reported only a line. Path names
// the field in the template, such as "resources.workers.count" or
// "parameters.nodes".
type Error struct {
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Path   string `json:"path,omitempty"`
	Msg    string `json:"message"`
}

// Error formats the error as "line 12, column 5: resources.workers.count:
// must be an integer or a ${param...} reference".
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found, sorted by position. Parse, Bind and
// BindValues return all the problems they find as Errors rather than
// stopping at the first.
type Errors []*Error

// Error joins the errors, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors one by one, for errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// errList collects errors while a template is checked.
type errList struct{ errs Errors }

// at records an error at a position.
func (l *errList) at(line, col int, path, format string, args ...any) {
	l.errs = append(l.errs, &Error{Line: line, Column: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// atNode records an error at a node's position.
func (l *errList) atNode(n *node, path, format string, args ...any) {
	l.at(n.line, n.col, path, format, args...)
}

// err returns the sorted, de-duplicated errors, or nil when there are none.
func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i], l.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Msg < b.Msg
	})
	out := l.errs[:0]
	for i, e := range l.errs {
		if i > 0 && *e == *l.errs[i-1] {
			continue
		}
		out = append(out, e)
	}
	return out
}
